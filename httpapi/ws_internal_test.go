package httpapi

import (
	"errors"
	"testing"
)

// A client whose replies pile up (it sends frames and reads none) is dropped once its outbox is
// full, rather than buffered without bound.
func TestFloodingClientIsDropped(t *testing.T) {
	var cause error
	w := &wsConn{cancel: func(err error) { cause = err }, outbox: make(chan []byte, wsOutboxSize)}
	for range wsOutboxSize {
		w.reply(wsOut{Type: "pong"})
	}
	if cause != nil {
		t.Fatalf("dropped with %d replies waiting: %v", wsOutboxSize, cause)
	}
	w.reply(wsOut{Type: "pong"})
	if !errors.Is(cause, errWSFlood) || len(w.outbox) != wsOutboxSize {
		t.Fatalf("one reply past the outbox: cause %v, %d waiting", cause, len(w.outbox))
	}
}
