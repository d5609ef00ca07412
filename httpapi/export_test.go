package httpapi

import "time"

// SetBeforeAnswer makes f run before each WebSocket frame's reply is queued, until the returned
// func undoes it.
func SetBeforeAnswer(f func()) (undo func()) {
	beforeAnswer.Store(&f)
	return func() { beforeAnswer.Store(nil) }
}

// SetOnSessionJoin makes f run whenever a request waits for a read of its session that another
// started (sessionFlights), until the returned func undoes it.
func SetOnSessionJoin(f func()) (undo func()) {
	onSessionJoin.Store(&f)
	return func() { onSessionJoin.Store(nil) }
}

// SetChatDetachAfter makes a streamed chat's response be taken over from net/http after d
// (streamSession), until the returned func undoes it.
func SetChatDetachAfter(d time.Duration) (undo func()) {
	was := chatDetachAfter.Swap(int64(d))
	return func() { chatDetachAfter.Store(was) }
}
