package openaiapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	parley "github.com/parleyhq/parley"
)

// responder turns what a request produces (Parley's run events, or a gateway model's stream)
// into OpenAI's answer: one chat.completion at the end, or chat.completion.chunk events as they
// come. One goroutine at a time calls it (the agent loop serializes its events).
type responder struct {
	b            *Backend
	w            http.ResponseWriter
	rc           *http.ResponseController
	id, model    string
	created      int64
	stream       bool
	includeUsage bool
	showTools    bool
	gateway      bool

	started      bool  // the stream's headers and first chunk are out
	werr         error // the first write error: the client is gone
	onWriteError func()
	buf          bytes.Buffer

	usage  parley.Usage
	final  *OutMessage // the answer: the run's last assistant message, or the gateway's whole answer
	finish string      // the gateway's finish reason
	info   Info
	runErr *parley.ErrorBody
}

func (b *Backend) newResponder(w http.ResponseWriter, req *ChatRequest, id, model string) *responder {
	r := &responder{b: b, w: w, rc: http.NewResponseController(w), id: id, model: model, created: b.Now().Unix(), stream: req.Stream}
	r.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	r.showTools = req.Parley != nil && req.Parley.ToolActivity
	return r
}

func (r *responder) failed() bool { return r.werr != nil }

// event takes one of Parley's run events.
func (r *responder) event(ev parley.Event) {
	switch ev.Type {
	case parley.EventStart:
		if ev.Model != "" {
			r.model = ev.Model
		}
		if r.stream {
			r.start()
		}
	case parley.EventChunk:
		r.text(ev.Content)
	case parley.EventReasoning:
		r.reasoning(ev.Content)
	case parley.EventRecord:
		if m := ev.Message; m != nil && m.Role == parley.RoleAssistant {
			text := m.Content.String()
			r.final = &OutMessage{Role: "assistant", Content: &text, Reasoning: m.Reasoning}
			if m.Model != "" {
				r.model = m.Model
			}
		}
	case parley.EventToolCall:
		if ev.ToolCall != nil {
			c := *ev.ToolCall
			r.activity(Activity{Type: "tool_call", ToolCall: &c})
		}
	case parley.EventToolResult:
		if m := ev.Message; m != nil {
			res := &ToolResult{ToolCallID: m.ToolCallID, Name: m.Name, Server: m.Server, Content: m.Content.String(), Success: m.Success == nil || *m.Success}
			r.activity(Activity{Type: "tool_result", Result: res})
		}
	case parley.EventUsage:
		if ev.Usage != nil {
			r.usage.Add(*ev.Usage)
		}
	case parley.EventError:
		r.runErr = ev.Error
	case parley.EventDone:
		r.info.FinishReason = ev.FinishReason
	}
}

func (r *responder) text(s string) {
	if r.stream && s != "" {
		r.delta(Delta{Content: &s})
	}
}

func (r *responder) reasoning(s string) {
	if r.stream && s != "" {
		r.delta(Delta{Reasoning: s})
	}
}

func (r *responder) toolDelta(d ToolCallDelta) {
	if r.stream {
		r.delta(Delta{ToolCalls: []ToolCallDelta{d}})
	}
}

func (r *responder) activity(a Activity) {
	if !r.showTools {
		return
	}
	if !r.stream {
		r.info.ToolActivity = append(r.info.ToolActivity, a)
		return
	}
	r.start()
	r.send(r.chunk(nil, &ChunkInfo{Activity: &a}))
}

// start writes the stream's headers and its first chunk (the assistant role), once.
func (r *responder) start() {
	if r.started {
		return
	}
	r.started = true
	h := r.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	r.w.WriteHeader(http.StatusOK)
	empty := ""
	r.send(r.chunk([]ChunkChoice{{Delta: Delta{Role: "assistant", Content: &empty}}}, nil))
}

func (r *responder) delta(d Delta) {
	r.start()
	r.send(r.chunk([]ChunkChoice{{Delta: d}}, nil))
}

func (r *responder) chunk(choices []ChunkChoice, info *ChunkInfo) Chunk {
	if choices == nil {
		choices = []ChunkChoice{}
	}
	c := Chunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.model, Choices: choices, Parley: info}
	if r.includeUsage {
		c.Usage = json.RawMessage("null")
	}
	return c
}

// send writes one data line and flushes it, within the write timeout.
func (r *responder) send(v any) {
	if r.werr != nil {
		return
	}
	r.buf.Reset()
	r.buf.WriteString("data: ")
	if s, ok := v.(string); ok {
		r.buf.WriteString(s)
		r.buf.WriteByte('\n')
	} else {
		enc := json.NewEncoder(&r.buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v) // ends with a newline
	}
	r.buf.WriteByte('\n')
	_ = r.rc.SetWriteDeadline(time.Now().Add(r.b.WriteTimeout))
	if _, err := r.w.Write(r.buf.Bytes()); err != nil {
		r.writeFailed(err)
		return
	}
	if err := r.rc.Flush(); err != nil {
		r.writeFailed(err)
	}
}

// comment writes an SSE comment line (a keep-alive) and flushes it.
func (r *responder) comment(text string) {
	if r.werr != nil {
		return
	}
	_ = r.rc.SetWriteDeadline(time.Now().Add(r.b.WriteTimeout))
	if _, err := r.w.Write([]byte(": " + text + "\n\n")); err != nil {
		r.writeFailed(err)
		return
	}
	if err := r.rc.Flush(); err != nil {
		r.writeFailed(err)
	}
}

func (r *responder) writeFailed(err error) {
	r.werr = err
	if r.onWriteError != nil {
		r.onWriteError()
	}
}

// finishReason is OpenAI's finish_reason for the answer.
func (r *responder) finishReason() string {
	if r.gateway {
		if r.finish == "" {
			return "stop"
		}
		return r.finish
	}
	if r.info.FinishReason == parley.FinishMaxIterations {
		return "length"
	}
	return "stop"
}

// end writes the end of the answer: the error err (or the run's), or the answer whole, or the
// stream's last chunks and [DONE].
func (r *responder) end(err error) {
	if err == nil && r.runErr != nil {
		err = &parley.Error{Code: r.runErr.Code, Message: r.runErr.Message, RetryAfter: time.Duration(r.runErr.RetryAfter) * time.Second}
	}
	if r.werr != nil {
		return
	}
	if err != nil {
		if !r.started {
			r.b.Error(r.w, err)
			return
		}
		// Inside a stream, an error is a data line with OpenAI's error object (the SDKs raise it),
		// and the stream ends without [DONE].
		r.send(ErrorBody{Detail(err)})
		return
	}
	finish := r.finishReason()
	if !r.stream {
		msg := OutMessage{Role: "assistant"}
		if r.final != nil {
			msg = *r.final
		}
		if msg.Content == nil && len(msg.ToolCalls) == 0 {
			empty := ""
			msg.Content = &empty
		}
		out := Completion{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.model,
			Choices: []Choice{{Message: msg, FinishReason: finish}}, Usage: usageOf(r.usage)}
		if r.info.SessionID != "" || r.info.ToolActivity != nil || (!r.gateway && r.info.FinishReason != "") {
			info := r.info
			out.Parley = &info
		}
		writeJSON(r.w, http.StatusOK, out)
		return
	}
	r.start()
	var info *ChunkInfo
	if !r.gateway {
		info = &ChunkInfo{SessionID: r.info.SessionID, RunID: r.info.RunID, FinishReason: r.info.FinishReason}
	}
	r.send(r.chunk([]ChunkChoice{{Delta: Delta{}, FinishReason: &finish}}, info))
	if r.includeUsage {
		c := r.chunk(nil, nil)
		u, _ := json.Marshal(usageOf(r.usage))
		c.Usage = u
		r.send(c)
	}
	r.send("[DONE]")
}
