// The reference application in Go: the same app as deploy/example-app/app.py.
//
// It reads the partitions the sidecar's group gives it with its own franz-go client (direct
// partition consumption, never a group member), keeps a running tally per user per partition,
// flushes a partition's tallies to the store when they grow, every COMMIT_INTERVAL_MS (then
// commits the flushed positions through POST /commit, fenced by generation) and on revoked
// (then answers the positions, which the sidecar commits before the group moves on); on lost it
// drops them. Record log, settings and behaviour as the Python app.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rebalance-sidecar/example-app/subscriber"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type partitionState struct {
	position int64
	flushed  int64
	tallies  map[string]int64
}

type commitBatch struct {
	epoch   int64
	offsets []subscriber.Offset
}

type worker struct {
	client       *kgo.Client
	admin        *kadm.Client
	group        string
	appID        string
	records      *bufio.Writer
	store        *bufio.Writer
	flushUsers   int
	owned        map[subscriber.Partition]*partitionState
	waiting      map[subscriber.Partition]bool
	generation   atomic.Int64
	epoch        atomic.Int64
	commands     chan func()
	commits      chan commitBatch
	commitPeriod time.Duration
}

func nowMicros() int64 { return time.Now().UnixNano() / 1000 }

func (w *worker) call(action func()) {
	done := make(chan struct{})
	w.commands <- func() { action(); close(done) }
	<-done
}

func (w *worker) sync() {
	if w.records != nil {
		_ = w.records.Flush()
	}
}

func (w *worker) line(format string, args ...any) {
	if w.records != nil {
		fmt.Fprintf(w.records, format, args...)
	}
}

func (w *worker) flush(tp subscriber.Partition, state *partitionState, reason string) {
	w.sync()
	saved, _ := json.Marshal(map[string]any{
		"topic": tp.Topic, "partition": tp.Partition, "position": state.position, "tallies": state.tallies,
	})
	_, _ = w.store.Write(append(saved, '\n'))
	_ = w.store.Flush()
	state.tallies = map[string]int64{}
	state.flushed = state.position
	w.line("F\t%s\t%d\t%s\t%d\t%s\t%d\n", tp.Topic, tp.Partition, w.appID, nowMicros(), reason, state.position)
	w.sync()
}

func (w *worker) flushAndCommit() {
	var offsets []subscriber.Offset
	for tp, state := range w.owned {
		if len(state.tallies) > 0 {
			w.flush(tp, state, "commit")
		}
		if state.flushed >= 0 {
			offsets = append(offsets, subscriber.Offset{Topic: tp.Topic, Partition: tp.Partition, Offset: state.flushed})
		}
	}
	if len(offsets) > 0 {
		select {
		case w.commits <- commitBatch{w.epoch.Load(), offsets}:
		default: // the committer is behind: the next round carries newer positions
		}
	}
}

func (w *worker) process(r *kgo.Record) {
	tp := subscriber.Partition{Topic: r.Topic, Partition: r.Partition}
	state := w.owned[tp]
	if state == nil || r.Offset < state.position {
		return // no longer ours, or before our start
	}
	amount, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		amount = 1
	}
	state.tallies[string(r.Key)] += amount
	state.position = r.Offset + 1
	w.line("P\t%s\t%d\t%d\t%s\t%d\n", r.Topic, r.Partition, r.Offset, w.appID, nowMicros())
	if len(state.tallies) >= w.flushUsers {
		w.flush(tp, state, "size")
	}
}

func (w *worker) start(partitions []subscriber.AssignedPartition) {
	add := map[string]map[int32]kgo.Offset{}
	for _, p := range partitions {
		offset := kgo.NewOffset().AtStart()
		position := int64(0)
		if p.Offset != nil {
			offset = kgo.NewOffset().At(*p.Offset)
			position = *p.Offset
		}
		w.owned[p.Partition] = &partitionState{position: position, flushed: -1, tallies: map[string]int64{}}
		if add[p.Topic] == nil {
			add[p.Topic] = map[int32]kgo.Offset{}
		}
		add[p.Topic][p.Partition.Partition] = offset
		log.Printf("reading %s[%d] from %v", p.Topic, p.Partition.Partition, p.Offset)
	}
	if len(add) > 0 {
		w.client.AddConsumePartitions(add)
	}
}

func (w *worker) resolveWaiting() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	found, err := w.admin.FetchOffsets(ctx, w.group)
	if err != nil {
		log.Printf("reading committed offsets failed (will retry): %v", err)
		return
	}
	var start []subscriber.AssignedPartition
	for tp := range w.waiting {
		p := subscriber.AssignedPartition{Partition: tp, Status: "none"}
		if o, ok := found.Lookup(tp.Topic, tp.Partition); ok && o.Err == nil && o.At >= 0 {
			at := o.At
			p.Offset, p.Status = &at, "committed"
		}
		start = append(start, p)
	}
	w.waiting = map[subscriber.Partition]bool{}
	w.start(start)
}

func (w *worker) stopReading(partitions []subscriber.Partition) []subscriber.Partition {
	w.epoch.Add(1)
	var gone []subscriber.Partition
	remove := map[string][]int32{}
	for _, tp := range partitions {
		delete(w.waiting, tp)
		if w.owned[tp] != nil {
			gone = append(gone, tp)
			remove[tp.Topic] = append(remove[tp.Topic], tp.Partition)
		}
	}
	if len(remove) > 0 {
		w.client.RemoveConsumePartitions(remove)
	}
	return gone
}

func (w *worker) run(stop <-chan struct{}) {
	lastCommit := time.Now()
	for {
		select {
		case <-stop:
			w.drain()
			w.flushAndCommit()
			w.sync()
			return
		default:
		}
		w.drain()
		if len(w.waiting) > 0 {
			w.resolveWaiting()
		}
		if len(w.owned) == 0 {
			select {
			case command := <-w.commands:
				command()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		fetches := w.client.PollRecords(ctx, 500)
		cancel()
		fetches.EachRecord(w.process)
		w.sync()
		if time.Since(lastCommit) >= w.commitPeriod {
			lastCommit = time.Now()
			w.flushAndCommit()
		}
	}
}

func (w *worker) drain() {
	for {
		select {
		case command := <-w.commands:
			command()
		default:
			return
		}
	}
}

// listener: each callback is a command run on the worker goroutine.
type listener struct{ w *worker }

func (l listener) OnAssigned(partitions []subscriber.AssignedPartition, info subscriber.EventInfo) {
	l.w.call(func() {
		l.w.epoch.Add(1)
		l.w.generation.Store(info.GenerationID)
		var known []subscriber.AssignedPartition
		for _, p := range partitions {
			if p.Status == "unknown" {
				l.w.waiting[p.Partition] = true
			} else {
				known = append(known, p)
			}
		}
		l.w.start(known)
	})
}

func (l listener) OnRevoked(partitions []subscriber.Partition, info subscriber.EventInfo) []subscriber.Offset {
	var offsets []subscriber.Offset
	l.w.call(func() {
		for _, tp := range l.w.stopReading(partitions) {
			state := l.w.owned[tp]
			delete(l.w.owned, tp)
			l.w.flush(tp, state, "revoke")
			offsets = append(offsets, subscriber.Offset{Topic: tp.Topic, Partition: tp.Partition, Offset: state.position})
		}
	})
	if info.Trace.Valid() { // the handling's place in the sidecar's trace of this rebalance
		log.Printf("revoked %d partitions, handing back %d offsets (traceparent %s)",
			len(partitions), len(offsets), info.Trace.Traceparent())
	}
	return offsets
}

func (l listener) OnLost(partitions []subscriber.Partition, info subscriber.EventInfo) {
	log.Printf("lost %d partitions (%s): state dropped", len(partitions), info.Reason)
	l.w.call(func() {
		for _, tp := range l.w.stopReading(partitions) {
			delete(l.w.owned, tp)
			l.w.line("L\t%s\t%d\t%s\t%d\n", tp.Topic, tp.Partition, l.w.appID, nowMicros())
		}
		l.w.sync()
	})
}

func getenv(names ...string) string {
	for _, name := range names {
		if value := os.Getenv(name); value != "" {
			return value
		}
	}
	return ""
}

func atoi(value string, fallback int) int {
	if n, err := strconv.Atoi(value); err == nil {
		return n
	}
	return fallback
}

func main() {
	secret := os.Getenv("WEBHOOK_SECRET")
	bootstrap := getenv("KAFKA_BOOTSTRAP_SERVERS", "SIDECAR_BOOTSTRAP_SERVERS")
	if !strings.HasPrefix(secret, "whsec_") || bootstrap == "" {
		fmt.Fprintln(os.Stderr, "WEBHOOK_SECRET (whsec_...) and KAFKA_BOOTSTRAP_SERVERS are required")
		os.Exit(2)
	}
	appID := getenv("APP_ID", "HOSTNAME")
	group := getenv("GROUP_ID", "SIDECAR_GROUP_ID")
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		log.Fatalf("kafka client: %v", err)
	}
	ping, cancelPing := context.WithTimeout(context.Background(), 10*time.Second)
	if err := client.Ping(ping); err != nil { // connect now, not on the first assignment
		log.Printf("Kafka not reachable yet: %v", err)
	}
	cancelPing()
	storeDir := getenv("STORE_DIR")
	if storeDir == "" {
		storeDir = "/var/lib/example-app"
	}
	if err := os.MkdirAll(storeDir, 0o755); err != nil {
		log.Fatalf("store: %v", err)
	}
	storeFile, err := os.OpenFile(storeDir+"/tallies-"+appID+".jsonl", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatalf("store: %v", err)
	}
	w := &worker{
		client: client, admin: kadm.NewClient(client), group: group, appID: appID,
		store: bufio.NewWriter(storeFile), flushUsers: atoi(os.Getenv("FLUSH_USERS"), 1000),
		owned: map[subscriber.Partition]*partitionState{}, waiting: map[subscriber.Partition]bool{},
		commands: make(chan func()), commits: make(chan commitBatch, 1),
		commitPeriod: time.Duration(atoi(os.Getenv("COMMIT_INTERVAL_MS"), 2000)) * time.Millisecond,
	}
	w.generation.Store(-1)
	if path := os.Getenv("RECORD_LOG"); path != "" {
		file, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatalf("record log: %v", err)
		}
		w.records = bufio.NewWriterSize(file, 1<<16)
	}
	sidecarURL := getenv("SIDECAR_URL")
	if sidecarURL == "" {
		sidecarURL = "http://127.0.0.1:8080"
	}
	api := subscriber.NewClient(sidecarURL, os.Getenv("SIDECAR_API_TOKEN"), 35*time.Second)
	sub, err := subscriber.New(secret, listener{w})
	if err != nil {
		log.Fatalf("WEBHOOK_SECRET: %v", err)
	}

	stopWorker, workerDone := make(chan struct{}), make(chan struct{})
	go func() { w.run(stopWorker); close(workerDone) }()
	stopWatch := make(chan struct{})
	go subscriber.Watch(sub, api, stopWatch)
	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		for batch := range w.commits {
			if batch.epoch != w.epoch.Load() {
				continue // the assignment changed since: the revoke answer committed instead
			}
			if err := api.Commit(batch.offsets, w.generation.Load()); err != nil {
				if errors.Is(err, subscriber.ErrFenced) {
					log.Printf("commit fenced (the member moved on): %v", err)
				} else {
					log.Printf("commit failed: %v", err)
				}
			}
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/rebalance", sub)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"status":"ok"}`))
	})
	host := getenv("HOST")
	if host == "" {
		host = "0.0.0.0"
	}
	port := getenv("PORT")
	if port == "" {
		port = "8082"
	}
	server := &http.Server{Addr: host + ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		// By now the preStop hook has drained the sidecar: revoked was handled.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}()
	log.Printf("%s listening on %s", appID, server.Addr)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("listen: %v", err)
	}
	close(stopWatch)
	close(stopWorker)
	<-workerDone // flushed, and a last commit of what it still owns queued
	close(w.commits)
	<-committerDone
	client.Close()
}
