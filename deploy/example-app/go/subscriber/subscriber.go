// Package subscriber is the application's side of rebalance-sidecar, in Go: the same shape as
// the Python kit (sidecar/subscriber/).
//
// A Subscriber verifies each webhook request's Standard Webhooks signature (the reference Go
// library), deduplicates on the event id (a redelivery gets the first answer again), calls the
// application's Listener (OnAssigned / OnRevoked / OnLost), tracks the assignment and its
// generation, and answers a revoked event with the offsets OnRevoked returns, which the sidecar
// commits before the group moves on. A Client commits through POST /commit with generation
// fencing (ErrFenced on 409). A Watchdog long-polls the sidecar: when it is gone, the
// application is told its partitions are lost before the group's session timeout gives them to
// someone else; when it is back, the assignment is re-read from GET /assignment.
//
// Assigned partitions carry Offset and Status: "committed", "none" or "unknown" ("unknown":
// do not start from a default; read the committed offset yourself or wait).
package subscriber

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const (
	Assigned = "kafka.partitions.assigned"
	Revoked  = "kafka.partitions.revoked"
	Lost     = "kafka.partitions.lost"
)

// Partition is a topic partition.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// AssignedPartition is a partition given to this member and where to start reading it.
type AssignedPartition struct {
	Partition
	Offset *int64 // the committed offset; nil: none, or not known
	Status string // "committed", "none" or "unknown"
}

// Offset is the next offset to read: one past the last record whose effects are safe.
type Offset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// EventInfo is what the application may want to know about the event it is handling.
type EventInfo struct {
	ID           string
	Type         string
	Sequence     int64 // -1 when absent
	GenerationID int64
	MemberID     string
	Reason       string
	Synthesized  bool // made by the kit (sidecar gone, re-sync), not the sidecar
	// Trace continues the sidecar's trace: this handling is a child of the delivery.
	Trace TraceContext
}

// Listener is the application's rebalance listener. Calls come one at a time, in order.
type Listener interface {
	OnAssigned(partitions []AssignedPartition, info EventInfo)
	OnRevoked(partitions []Partition, info EventInfo) []Offset
	OnLost(partitions []Partition, info EventInfo)
}

type wirePartition struct {
	Topic        string  `json:"topic"`
	Partition    int32   `json:"partition"`
	Offset       *int64  `json:"offset"`
	OffsetStatus *string `json:"offset_status"`
}

type eventData struct {
	GenerationID *int64          `json:"generation_id"`
	MemberID     *string         `json:"member_id"`
	Partitions   []wirePartition `json:"partitions"`
	Assignment   []Partition     `json:"assignment"`
	Reason       *string         `json:"reason"`
}

type event struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Sequence json.RawMessage `json:"sequence"`
	Data     *eventData      `json:"data"`
}

type answer = map[string]any

// Subscriber verifies, deduplicates and dispatches the sidecar's events.
type Subscriber struct {
	webhook  *standardwebhooks.Webhook
	listener Listener
	mu       sync.Mutex
	answers  map[string]answer
	order    []string
	remember int
	owned    map[Partition]bool
	gen      int64
	memberID string
	seen     int
	floor    *int64
}

// New makes a Subscriber for the webhook's whsec_ secret.
func New(secret string, listener Listener) (*Subscriber, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	return &Subscriber{
		webhook: wh, listener: listener, answers: map[string]answer{}, remember: 4096,
		owned: map[Partition]bool{}, gen: -1,
	}, nil
}

// Assignment is the partitions this member owns, as far as the kit knows.
func (s *Subscriber) Assignment() []Partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sorted(s.owned)
}

// GenerationID is the group generation of the last event.
func (s *Subscriber) GenerationID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

func sorted(set map[Partition]bool) []Partition {
	out := make([]Partition, 0, len(set))
	for tp := range set {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

func parseSequence(raw json.RawMessage) int64 {
	text := strings.Trim(string(raw), `"`)
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ServeHTTP answers the sidecar's POSTs: 401 for a bad signature, 400 for a bad event.
func (s *Subscriber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	if r.Method != http.MethodPost {
		reply(http.StatusMethodNotAllowed, answer{"error": "POST only"})
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		reply(http.StatusBadRequest, answer{"error": err.Error()})
		return
	}
	if err := s.webhook.Verify(payload, r.Header); err != nil {
		reply(http.StatusUnauthorized, answer{"error": "bad signature: " + err.Error()})
		return
	}
	result, err := s.DispatchTraced(payload, r.Header.Get("traceparent"))
	if err != nil {
		reply(http.StatusBadRequest, answer{"error": "bad event: " + err.Error()})
		return
	}
	reply(http.StatusOK, result)
}

// Dispatch handles a verified CloudEvent; the answer ({"offsets": [...]} for revoked).
func (s *Subscriber) Dispatch(payload []byte) (answer, error) {
	return s.DispatchTraced(payload, "")
}

// DispatchTraced is Dispatch with the POST's traceparent header: the listener's EventInfo
// carries the handling's trace context (a child of the delivery attempt's span).
func (s *Subscriber) DispatchTraced(payload []byte, traceparent string) (answer, error) {
	var ev event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	if ev.ID == "" || ev.Data == nil {
		return nil, errors.New("a CloudEvent needs an id and an object data")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if previous, ok := s.answers[ev.ID]; ok {
		return previous, nil
	}
	s.seen++
	info := EventInfo{ID: ev.ID, Type: ev.Type, Sequence: parseSequence(ev.Sequence), GenerationID: -1,
		Trace: ParseTraceparent(traceparent)}
	if ev.Data.GenerationID != nil {
		info.GenerationID = *ev.Data.GenerationID
	}
	if ev.Data.MemberID != nil {
		info.MemberID = *ev.Data.MemberID
	}
	if ev.Data.Reason != nil {
		info.Reason = *ev.Data.Reason
	}
	var result answer
	if s.floor != nil && info.Sequence >= 0 && info.Sequence <= *s.floor {
		result = answer{} // already reflected by the re-sync
	} else {
		s.floor = nil
		result = s.apply(ev, info)
	}
	s.answers[ev.ID] = result
	s.order = append(s.order, ev.ID)
	for len(s.order) > s.remember {
		delete(s.answers, s.order[0])
		s.order = s.order[1:]
	}
	return result, nil
}

func (s *Subscriber) apply(ev event, info EventInfo) answer {
	if info.GenerationID >= 0 {
		s.gen = info.GenerationID
	}
	if info.MemberID != "" {
		s.memberID = info.MemberID
	}
	switch ev.Type {
	case Assigned:
		var fresh []AssignedPartition
		for _, p := range ev.Data.Partitions {
			tp := Partition{p.Topic, p.Partition}
			if s.owned[tp] {
				continue
			}
			status := "none"
			if p.Offset != nil {
				status = "committed"
			}
			if p.OffsetStatus != nil && (*p.OffsetStatus == "unknown" || *p.OffsetStatus == "none") {
				status = *p.OffsetStatus
			}
			offset := p.Offset
			if status != "committed" {
				offset = nil
			}
			fresh = append(fresh, AssignedPartition{tp, offset, status})
		}
		if ev.Data.Assignment != nil {
			s.owned = map[Partition]bool{}
			for _, tp := range ev.Data.Assignment {
				s.owned[tp] = true
			}
		}
		for _, p := range fresh {
			s.owned[p.Partition] = true
		}
		if len(fresh) > 0 {
			s.listener.OnAssigned(fresh, info)
		}
		return answer{}
	case Revoked, Lost:
		taken := map[Partition]bool{}
		for _, p := range ev.Data.Partitions {
			tp := Partition{p.Topic, p.Partition}
			if s.owned[tp] {
				taken[tp] = true
				delete(s.owned, tp)
			}
		}
		list := sorted(taken)
		if ev.Type == Lost {
			if len(list) > 0 {
				s.listener.OnLost(list, info)
			}
			return answer{}
		}
		offsets := []Offset{}
		if len(list) > 0 {
			for _, o := range s.listener.OnRevoked(list, info) {
				if taken[Partition{o.Topic, o.Partition}] {
					offsets = append(offsets, o)
				}
			}
		}
		return answer{"offsets": offsets}
	}
	log.Printf("ignoring event type %s", ev.Type)
	return answer{}
}

// Snapshot is the sidecar's GET /assignment.
type Snapshot struct {
	State        string          `json:"state"`
	GenerationID int64           `json:"generation_id"`
	MemberID     *string         `json:"member_id"`
	Partitions   []Partition     `json:"partitions"`
	Sequence     json.RawMessage `json:"sequence"`
}

// Resync adopts GET /assignment when no event told us (app restart, sidecar back); the
// partitions come with Status "unknown". It does nothing once an event was handled.
func (s *Subscriber) Resync(snapshot Snapshot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen > 0 || snapshot.State != "stable" {
		return false
	}
	s.gen = snapshot.GenerationID
	if snapshot.MemberID != nil {
		s.memberID = *snapshot.MemberID
	}
	floor := parseSequence(snapshot.Sequence)
	s.floor = &floor
	s.seen++
	var fresh []AssignedPartition
	for _, tp := range snapshot.Partitions {
		if !s.owned[tp] {
			s.owned[tp] = true
			fresh = append(fresh, AssignedPartition{tp, nil, "unknown"})
		}
	}
	if len(fresh) > 0 {
		s.listener.OnAssigned(fresh, EventInfo{
			ID: "resync", Type: Assigned, Sequence: floor, GenerationID: s.gen,
			MemberID: s.memberID, Reason: "re-sync from GET /assignment", Synthesized: true,
		})
	}
	return true
}

// SidecarGone drops everything owned: the sidecar is unreachable, the partitions may soon be
// someone else's.
func (s *Subscriber) SidecarGone(reason string) []Partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := sorted(s.owned)
	s.owned = map[Partition]bool{}
	s.seen = 0
	if len(taken) > 0 {
		s.listener.OnLost(taken, EventInfo{
			ID: "sidecar-gone", Type: Lost, Sequence: -1, GenerationID: s.gen,
			MemberID: s.memberID, Reason: reason, Synthesized: true,
		})
	}
	return taken
}

// ErrFenced is returned by Commit on 409: the member no longer owns a partition, or moved on.
var ErrFenced = errors.New("fenced: the member no longer owns these partitions")

// Client talks to the sidecar's API.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
	noGen   bool
}

// NewClient for the sidecar at baseURL (e.g. http://127.0.0.1:8080).
func NewClient(baseURL, token string, timeout time.Duration) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: timeout}}
}

// Assignment reads GET /assignment; with after >= 0, long-polls for the next change.
func (c *Client) Assignment(after int64, wait time.Duration) (Snapshot, error) {
	url := c.BaseURL + "/assignment"
	if after >= 0 {
		url += fmt.Sprintf("?after=%d&wait=%g", after, wait.Seconds())
	}
	var snap Snapshot
	response, err := c.HTTP.Get(url)
	if err != nil {
		return snap, err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return snap, fmt.Errorf("GET /assignment answered %d", response.StatusCode)
	}
	return snap, json.NewDecoder(response.Body).Decode(&snap)
}

// Commit commits as the member; ErrFenced on 409.
func (c *Client) Commit(offsets []Offset, generation int64) error {
	if len(offsets) == 0 {
		return nil
	}
	body := map[string]any{"offsets": offsets}
	if generation >= 0 && !c.noGen {
		body["generation_id"] = generation
	}
	payload, _ := json.Marshal(body)
	request, _ := http.NewRequest(http.MethodPost, c.BaseURL+"/commit", bytes.NewReader(payload))
	request.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		request.Header.Set("Authorization", "Bearer "+c.Token)
	}
	response, err := c.HTTP.Do(request)
	if err != nil {
		return fmt.Errorf("sidecar unreachable: %w", err)
	}
	defer response.Body.Close()
	detail, _ := io.ReadAll(io.LimitReader(response.Body, 4096))
	switch {
	case response.StatusCode == 422 && body["generation_id"] != nil && bytes.Contains(detail, []byte("generation_id")):
		c.noGen = true // a sidecar without generation fencing: its ownership check still fences
		return c.Commit(offsets, -1)
	case response.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrFenced, detail)
	case response.StatusCode < 200 || response.StatusCode >= 300:
		return fmt.Errorf("POST /commit answered %d: %s", response.StatusCode, detail)
	}
	return nil
}

// Watch long-polls the sidecar until stop is closed: on loss of it (refused for refusedAfter,
// or failing for unreachableAfter) it calls SidecarGone; when it is stable again, Resync.
func Watch(s *Subscriber, c *Client, stop <-chan struct{}) {
	const refusedAfter, unreachableAfter = 500 * time.Millisecond, 3 * time.Second
	client := NewClient(c.BaseURL, c.Token, unreachableAfter)
	var failingSince, refusedSince time.Time
	gone := false
	sequence := int64(-1)
	for {
		select {
		case <-stop:
			return
		default:
		}
		snap, err := client.Assignment(sequence, 2*time.Second)
		if err != nil {
			now := time.Now()
			if failingSince.IsZero() {
				failingSince = now
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				if refusedSince.IsZero() {
					refusedSince = now
				}
			} else {
				refusedSince = time.Time{}
			}
			if !gone && (now.Sub(failingSince) >= unreachableAfter ||
				(!refusedSince.IsZero() && now.Sub(refusedSince) >= refusedAfter)) {
				gone = true
				lost := s.SidecarGone("sidecar unreachable")
				log.Printf("sidecar unreachable: %d partitions dropped", len(lost))
			}
			sequence = -1
			time.Sleep(100 * time.Millisecond)
			continue
		}
		failingSince, refusedSince = time.Time{}, time.Time{}
		sequence = parseSequence(snap.Sequence)
		if snap.State == "stable" {
			gone = false
			s.Resync(snap)
		} else if sequence < 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
}
