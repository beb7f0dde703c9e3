// The gold standard of the handover benchmark: a Java consumer with an in-process
// ConsumerRebalanceListener (the pattern of KafkaConsumer's documentation): a running tally per
// user, flushed to a store when it grows, on every commit, and in onPartitionsRevoked, which
// then commits the positions synchronously, before the rebalance goes on.
//
// Same record log as the reference apps (deploy/example-app/app.py): P/F/L lines, tab-separated.
// Settings (environment): KAFKA_BOOTSTRAP_SERVERS, GROUP_ID, TOPIC, APP_ID, RECORD_LOG,
// STORE_DIR, FLUSH_USERS, COMMIT_INTERVAL_MS, SESSION_TIMEOUT_MS, HEARTBEAT_MS.
// stdin: a line "enforce" calls consumer.enforceRebalance(). SIGTERM: close() (revokes).

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ListenerApp {
    static final class State {
        long position = -1;
        Map<String, Long> tallies = new HashMap<>();
    }

    private final KafkaConsumer<String, String> consumer;
    private final Map<TopicPartition, State> owned = new HashMap<>();
    private final BufferedWriter records;
    private final BufferedWriter store;
    private final String appId;
    private final int flushUsers;

    ListenerApp(KafkaConsumer<String, String> consumer, String appId, Path recordLog, Path store,
                int flushUsers) throws IOException {
        this.consumer = consumer;
        this.appId = appId;
        this.records = new BufferedWriter(new FileWriter(recordLog.toFile(), true));
        this.store = new BufferedWriter(new FileWriter(store.toFile(), true));
        this.flushUsers = flushUsers;
    }

    static long nowMicros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
    }

    void sync() {
        try {
            records.flush();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    void line(String text) {
        try {
            records.write(text);
            records.write('\n');
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    void flush(TopicPartition tp, State state, String reason) {
        sync();
        try {
            store.write("{\"topic\":\"" + tp.topic() + "\",\"partition\":" + tp.partition()
                + ",\"position\":" + state.position + ",\"users\":" + state.tallies.size() + "}\n");
            store.flush();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        state.tallies = new HashMap<>();
        line("F\t" + tp.topic() + "\t" + tp.partition() + "\t" + appId + "\t" + nowMicros() + "\t"
            + reason + "\t" + state.position);
        sync();
    }

    Map<TopicPartition, OffsetAndMetadata> flushAll(Collection<TopicPartition> partitions,
                                                     String reason) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : partitions) {
            State state = owned.get(tp);
            if (state == null || state.position < 0) {
                continue;
            }
            if (!state.tallies.isEmpty() || reason.equals("revoke")) {
                flush(tp, state, reason);
            }
            offsets.put(tp, new OffsetAndMetadata(state.position));
        }
        return offsets;
    }

    final ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            Map<TopicPartition, OffsetAndMetadata> offsets = flushAll(partitions, "revoke");
            if (!offsets.isEmpty()) {
                consumer.commitSync(offsets);
            }
            for (TopicPartition tp : partitions) {
                owned.remove(tp);
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                owned.put(tp, new State());
            }
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                owned.remove(tp);
                line("L\t" + tp.topic() + "\t" + tp.partition() + "\t" + appId + "\t" + nowMicros());
            }
            sync();
        }
    };

    void process(ConsumerRecord<String, String> record) {
        TopicPartition tp = new TopicPartition(record.topic(), record.partition());
        State state = owned.get(tp);
        if (state == null) {
            return;
        }
        long amount;
        try {
            amount = Long.parseLong(record.value());
        } catch (NumberFormatException e) {
            amount = 1;
        }
        state.tallies.merge(record.key() == null ? "" : record.key(), amount, Long::sum);
        state.position = record.offset() + 1;
        line("P\t" + record.topic() + "\t" + record.partition() + "\t" + record.offset() + "\t"
            + appId + "\t" + nowMicros());
        if (state.tallies.size() >= flushUsers) {
            flush(tp, state, "size");
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> env = System.getenv();
        String appId = env.getOrDefault("APP_ID", "java");
        Path recordLog = Path.of(env.get("RECORD_LOG"));
        Path storeDir = Path.of(env.getOrDefault("STORE_DIR", "/tmp/listener-app"));
        Files.createDirectories(storeDir);
        long commitInterval = Long.parseLong(env.getOrDefault("COMMIT_INTERVAL_MS", "2000"));

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, env.get("KAFKA_BOOTSTRAP_SERVERS"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, env.get("GROUP_ID"));
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (env.getOrDefault("GROUP_PROTOCOL", "classic").equals("consumer")) {
            // KIP-848: the broker assigns and sets the session and heartbeat.
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                env.getOrDefault("ASSIGNOR", "org.apache.kafka.clients.consumer.RangeAssignor"));
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, env.getOrDefault("SESSION_TIMEOUT_MS", "6000"));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, env.getOrDefault("HEARTBEAT_MS", "500"));
        }
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "50");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        ListenerApp app = new ListenerApp(consumer, appId, recordLog,
            storeDir.resolve("tallies-" + appId + ".jsonl"),
            Integer.parseInt(env.getOrDefault("FLUSH_USERS", "1000")));

        AtomicBoolean enforce = new AtomicBoolean(false);
        Thread commands = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("enforce")) {
                        enforce.set(true);
                    }
                }
            } catch (IOException ignored) {
                // stdin closed
            }
        });
        commands.setDaemon(true);
        commands.start();

        CountDownLatch done = new CountDownLatch(1);
        AtomicBoolean stopping = new AtomicBoolean(false);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            consumer.wakeup();
            try {
                done.await();
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
        }));

        consumer.subscribe(List.of(env.get("TOPIC")), app.listener);
        Files.writeString(recordLog.resolveSibling(recordLog.getFileName().toString()
            .replaceAll("\\.log$", "") + ".ready"), "ready\n");
        long lastCommit = System.currentTimeMillis();
        try {
            while (!stopping.get()) {
                if (enforce.getAndSet(false)) {
                    consumer.enforceRebalance("handover benchmark");
                }
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(50));
                for (ConsumerRecord<String, String> record : batch) {
                    app.process(record);
                }
                app.sync();
                if (System.currentTimeMillis() - lastCommit >= commitInterval) {
                    lastCommit = System.currentTimeMillis();
                    Map<TopicPartition, OffsetAndMetadata> offsets =
                        app.flushAll(List.copyOf(app.owned.keySet()), "commit");
                    if (!offsets.isEmpty()) {
                        try {
                            consumer.commitSync(offsets);
                        } catch (org.apache.kafka.common.errors.RebalanceInProgressException
                                 | org.apache.kafka.clients.consumer.CommitFailedException e) {
                            // the listener commits on revoke
                        }
                    }
                }
            }
        } catch (WakeupException e) {
            // SIGTERM
        } finally {
            consumer.close(); // onPartitionsRevoked: flush and commit
            app.sync();
            done.countDown();
        }
    }
}
