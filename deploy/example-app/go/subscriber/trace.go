package subscriber

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// TraceContext continues the sidecar's trace (W3C Trace Context): the application's
// handling of an event is a span whose parent is the delivery attempt named by the POST's
// traceparent header. The kit depends on no OpenTelemetry module, so it records and exports
// nothing itself: an application with an OpenTelemetry SDK starts its span from these ids
// (trace.SpanContextFromContext / trace.NewSpanContext) and sends Traceparent() onwards.
type TraceContext struct {
	TraceID      string // 32 lowercase hex digits; "" when the POST carried no valid traceparent
	ParentSpanID string // the delivery attempt's span
	SpanID       string // this handling's span, drawn by the kit
	Sampled      bool
}

// Valid reports whether the POST carried a usable traceparent.
func (t TraceContext) Valid() bool { return t.TraceID != "" }

// Traceparent is the W3C header value naming this handling's span ("" when not Valid).
func (t TraceContext) Traceparent() string {
	if !t.Valid() {
		return ""
	}
	flags := "00"
	if t.Sampled {
		flags = "01"
	}
	return "00-" + t.TraceID + "-" + t.SpanID + "-" + flags
}

func isHex(s string, n int) bool {
	if len(s) != n || strings.Trim(s, "0") == "" {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseTraceparent reads a W3C traceparent header and draws the child span's id; the
// zero TraceContext for a missing or invalid one.
func ParseTraceparent(header string) TraceContext {
	parts := strings.Split(strings.TrimSpace(header), "-")
	if len(parts) < 4 || !isHex(parts[0], 2) && parts[0] != "00" || parts[0] == "ff" {
		return TraceContext{}
	}
	if parts[0] == "00" && len(parts) != 4 {
		return TraceContext{}
	}
	if !isHex(parts[1], 32) || !isHex(parts[2], 16) || len(parts[3]) != 2 {
		return TraceContext{}
	}
	flags, err := hex.DecodeString(parts[3])
	if err != nil {
		return TraceContext{}
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return TraceContext{}
	}
	return TraceContext{
		TraceID:      parts[1],
		ParentSpanID: parts[2],
		SpanID:       hex.EncodeToString(id),
		Sampled:      flags[0]&1 == 1,
	}
}
