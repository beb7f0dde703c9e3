package subscriber

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const secret = "whsec_a2l0LXRlc3Qtc2VjcmV0LTEyMzQ1Njc4OTA="

type recorder struct {
	calls     []string
	assigned  []AssignedPartition
	positions map[Partition]int64
}

func (r *recorder) OnAssigned(ps []AssignedPartition, info EventInfo) {
	r.calls = append(r.calls, "assigned")
	r.assigned = append(r.assigned, ps...)
	for _, p := range ps {
		if p.Offset != nil {
			r.positions[p.Partition] = *p.Offset
		}
	}
}

func (r *recorder) OnRevoked(ps []Partition, info EventInfo) []Offset {
	r.calls = append(r.calls, "revoked")
	var out []Offset
	for _, tp := range ps {
		if at, ok := r.positions[tp]; ok {
			out = append(out, Offset{tp.Topic, tp.Partition, at})
		}
	}
	return out
}

func (r *recorder) OnLost(ps []Partition, info EventInfo) { r.calls = append(r.calls, "lost") }

func post(t *testing.T, url, id string, event map[string]any, sign bool) *http.Response {
	t.Helper()
	body, _ := json.Marshal(event)
	request, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	now := time.Now()
	request.Header.Set("webhook-id", id)
	request.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	signature := "v1,AAAA"
	if sign {
		wh, _ := standardwebhooks.NewWebhook(secret)
		signature, _ = wh.Sign(id, now, body)
	}
	request.Header.Set("webhook-signature", signature)
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	return response
}

func makeEvent(id, kind string, seq int, partitions []map[string]any, assignment []map[string]any) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": id, "type": kind,
		"sequence": fmt.Sprintf("%020d", seq), // zero-padded, as the contract allows
		"data": map[string]any{
			"generation_id": 5, "member_id": "m-1", "partitions": partitions,
			"assignment": assignment,
		},
	}
}

func TestSignedEventsDispatchDeduplicateAndAnswerOffsets(t *testing.T) {
	r := &recorder{positions: map[Partition]int64{}}
	sub, err := New(secret, r)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(sub)
	defer server.Close()
	p0 := map[string]any{"topic": "orders", "partition": 0}
	p1 := map[string]any{"topic": "orders", "partition": 1}

	forged := post(t, server.URL, "e0", makeEvent("e0", Assigned, 1, nil, nil), false)
	if forged.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %d", forged.StatusCode)
	}
	assigned := makeEvent("e1", Assigned, 1, []map[string]any{
		{"topic": "orders", "partition": 0, "offset": 40},
		{"topic": "orders", "partition": 1, "offset": nil, "offset_status": "unknown"},
	}, []map[string]any{p0, p1})
	if got := post(t, server.URL, "e1", assigned, true); got.StatusCode != http.StatusOK {
		t.Fatalf("assigned: %d", got.StatusCode)
	}
	if len(r.assigned) != 2 || r.assigned[0].Status != "committed" || r.assigned[1].Status != "unknown" {
		t.Fatalf("assigned partitions: %+v", r.assigned)
	}
	if sub.GenerationID() != 5 || len(sub.Assignment()) != 2 {
		t.Fatalf("tracking: gen %d, %v", sub.GenerationID(), sub.Assignment())
	}
	revoked := makeEvent("e2", Revoked, 2, []map[string]any{p0, p1}, []map[string]any{})
	var answers []map[string]any
	for i := 0; i < 2; i++ { // the second is a redelivery: same id, same answer
		response := post(t, server.URL, "e2", revoked, true)
		var answer map[string]any
		_ = json.NewDecoder(response.Body).Decode(&answer)
		answers = append(answers, answer)
	}
	want := `{"offsets":[{"offset":40,"partition":0,"topic":"orders"}]}`
	for _, answer := range answers {
		got, _ := json.Marshal(answer)
		if string(got) != want {
			t.Fatalf("revoke answer %s, want %s", got, want)
		}
	}
	if fmt.Sprint(r.calls) != "[assigned revoked]" {
		t.Fatalf("calls %v", r.calls)
	}
	if len(sub.Assignment()) != 0 {
		t.Fatalf("still owned: %v", sub.Assignment())
	}
}

func TestSidecarGoneDropsEverything(t *testing.T) {
	r := &recorder{positions: map[Partition]int64{}}
	sub, _ := New(secret, r)
	seq := json.RawMessage(`"00000000000000000003"`)
	if !sub.Resync(Snapshot{State: "stable", GenerationID: 2, Partitions: []Partition{{"orders", 3}}, Sequence: seq}) {
		t.Fatal("no re-sync")
	}
	if r.assigned[0].Status != "unknown" {
		t.Fatalf("re-synced partitions must be unknown: %+v", r.assigned)
	}
	if lost := sub.SidecarGone("test"); len(lost) != 1 || r.calls[len(r.calls)-1] != "lost" {
		t.Fatalf("lost %v, calls %v", lost, r.calls)
	}
}

type traceRecorder struct{ traces []TraceContext }

func (r *traceRecorder) OnAssigned(ps []AssignedPartition, info EventInfo) {
	r.traces = append(r.traces, info.Trace)
}
func (r *traceRecorder) OnRevoked(ps []Partition, info EventInfo) []Offset { return nil }
func (r *traceRecorder) OnLost(ps []Partition, info EventInfo)             {}

func TestTheHandlingContinuesTheDeliverysTrace(t *testing.T) {
	r := &traceRecorder{}
	sub, err := New(secret, r)
	if err != nil {
		t.Fatal(err)
	}
	const delivery = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p0 := map[string]any{"topic": "orders", "partition": 0, "offset": 1}
	p1 := map[string]any{"topic": "orders", "partition": 1, "offset": 1}
	event, _ := json.Marshal(makeEvent("t1", Assigned, 1, []map[string]any{p0}, []map[string]any{p0}))
	if _, err := sub.DispatchTraced(event, delivery); err != nil {
		t.Fatal(err)
	}
	event, _ = json.Marshal(makeEvent("t2", Assigned, 2, []map[string]any{p1}, []map[string]any{p0, p1}))
	if _, err := sub.DispatchTraced(event, "00-not-a-traceparent"); err != nil {
		t.Fatal(err)
	}
	if len(r.traces) != 2 {
		t.Fatalf("listener called %d times", len(r.traces))
	}
	got := r.traces[0]
	if got.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || got.ParentSpanID != "00f067aa0ba902b7" ||
		!got.Sampled || len(got.SpanID) != 16 || got.SpanID == got.ParentSpanID {
		t.Fatalf("trace %+v", got)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + got.SpanID + "-01"; got.Traceparent() != want {
		t.Fatalf("traceparent %s, want %s", got.Traceparent(), want)
	}
	if r.traces[1].Valid() || r.traces[1].Traceparent() != "" {
		t.Fatalf("an invalid header gave %+v", r.traces[1])
	}
	for _, bad := range []string{
		"", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		delivery + "-extra",
	} {
		if ParseTraceparent(bad).Valid() {
			t.Fatalf("%q accepted", bad)
		}
	}
}
