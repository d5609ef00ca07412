package httpapi

// SetBeforeAnswer makes f run before each WebSocket frame's reply is queued, until the returned
// func undoes it.
func SetBeforeAnswer(f func()) (undo func()) {
	beforeAnswer.Store(&f)
	return func() { beforeAnswer.Store(nil) }
}
