package httpapi

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// wsFrame builds a frame's bytes: header (with a mask key when masked) and payload.
func wsFrame(opcode byte, payload []byte, masked bool) []byte {
	b := []byte{0x80 | opcode}
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if masked {
		b = append(b, 1, 2, 3, 4)
	}
	return append(b, payload...)
}

// The tracker is between frames exactly at the ends of frames, however the bytes are split.
func TestFrameTracker(t *testing.T) {
	frames := [][]byte{
		wsFrame(0x1, []byte(`{"type":"ping"}`), true),
		wsFrame(0xA, nil, true), // an empty pong
		wsFrame(0x1, bytes.Repeat([]byte("x"), 300), true),
		wsFrame(0x2, bytes.Repeat([]byte("y"), 70000), true),
		wsFrame(0x9, []byte("1"), false),
	}
	var all []byte
	ends := map[int]bool{}
	for _, f := range frames {
		all = append(all, f...)
		ends[len(all)] = true
	}
	for _, step := range []int{1, 2, 3, 7, 100, 4096, len(all)} {
		var tr frameTracker
		for i := 0; i < len(all); i += step {
			j := min(i+step, len(all))
			tr.feed(all[i:j])
			if got := tr.atBoundary(); got != ends[j] {
				t.Fatalf("step %d, after %d bytes: at a boundary %v, want %v", step, j, got, ends[j])
			}
		}
	}
}
