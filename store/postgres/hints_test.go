package postgres

import (
	"strconv"
	"testing"
)

// A hint is taken once, only by the end of the run it was left for; forget drops it; the map
// never holds more than maxHints.
func TestAnswerHints(t *testing.T) {
	var h answerHints
	h.put("s", answerHint{run: "r1", seq: 2, parent: "m"})
	if _, ok := h.take("s", "r2"); ok {
		t.Error("another run's end took the hint")
	}
	if _, ok := h.take("s", "r1"); ok {
		t.Error("the hint was there after a take")
	}
	h.put("s", answerHint{run: "r1", seq: 2, parent: "m"})
	if got, ok := h.take("s", "r1"); !ok || got.seq != 2 || got.parent != "m" {
		t.Errorf("take = %+v, %v; want seq 2 after m", got, ok)
	}
	h.put("s", answerHint{run: "r1", seq: 2, parent: "m"})
	h.forget("s")
	if _, ok := h.take("s", "r1"); ok {
		t.Error("a forgotten hint was taken")
	}
	for i := range maxHints + 10 {
		h.put(strconv.Itoa(i), answerHint{run: "r", seq: 2})
		if len(h.m) > maxHints {
			t.Fatalf("%d hints kept, at most %d wanted", len(h.m), maxHints)
		}
	}
	if _, ok := h.take(strconv.Itoa(maxHints+9), "r"); !ok {
		t.Error("the newest hint was dropped")
	}
}
