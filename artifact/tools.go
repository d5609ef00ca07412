package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/ask"
	"github.com/parleyhq/parley/tools"
)

// Config configures the artifact tools.
type Config struct {
	Store parley.ArtifactStore
	// Model, when its Name is set, is the artifact model: given instructions instead of content,
	// the tools ask it to write the artifact with a prompt for its type (seed 003 §3).
	Model ask.Model
	Now   func() time.Time
	Log   *slog.Logger
	// InLineage, if set, reports whether session ancestorID is sessionID or one it was forked
	// from (parley.FileStore.InLineage): update_artifact then tells a fork why an artifact of the
	// conversation it was forked from cannot be changed, instead of saying there is none.
	InLineage func(ctx context.Context, sessionID, ancestorID string) (bool, error)
}

// Tools returns create_artifact and update_artifact.
func Tools(cfg Config) []parley.Tool {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	x := &executor{cfg: cfg}
	create := &tools.Func{Def: x.createSpec(), Fn: x.create, Session: true}
	update := &tools.Func{Def: x.updateSpec(), Fn: x.update, Session: true}
	if !x.generates() {
		return []parley.Tool{create, update}
	}
	// The artifact model may take longer than a tool call usually does: up to two of its calls.
	d := cfg.Model.Timeout
	if d <= 0 {
		d = 2 * time.Minute
	}
	return []parley.Tool{timed{create, 2*d + 10*time.Second}, timed{update, 2*d + 10*time.Second}}
}

// timed gives a tool its own time limit (tools.Timed).
type timed struct {
	*tools.Func
	d time.Duration
}

func (t timed) Timeout() time.Duration { return t.d }

type executor struct{ cfg Config }

func (x *executor) generates() bool { return x.cfg.Model.Name != "" }

func (x *executor) createSpec() parley.ToolSpec {
	desc := "Creates an artifact shown to the user beside the chat: a React component (default export, may import only " +
		strings.Join(AllowedImports, ", ") + "; runs sandboxed without network), an HTML page, an SVG image, code in a language, " +
		"a Mermaid diagram or a Markdown document. Returns the artifact's id for update_artifact."
	content := `"content":{"type":"string","description":"The whole artifact: the component's module, the HTML, the SVG, the code, the diagram or the Markdown"}`
	required := `"type","title","content"`
	if x.generates() {
		desc += " Give either content, or instructions for the artifact model to write it."
		content += `,"instructions":{"type":"string","maxLength":10000,"description":"What to make, when you do not write the content yourself"}`
		required = `"type","title"`
	}
	return parley.ToolSpec{Name: "create_artifact", Description: desc, Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"type":{"type":"string","enum":["react","html","svg","code","mermaid","markdown"]},` +
		`"title":{"type":"string","minLength":1,"maxLength":200},` +
		`"language":{"type":"string","maxLength":40,"description":"For code: the language, e.g. go or python"},` +
		content + `},"required":[` + required + `],"additionalProperties":false}`)}
}

func (x *executor) updateSpec() parley.ToolSpec {
	desc := "Replaces the content (and optionally the title) of an artifact of this conversation; the update is a new version, the old ones stay."
	props := `"id":{"type":"string"},"title":{"type":"string","minLength":1,"maxLength":200},"content":{"type":"string","description":"The whole new content"}`
	required := `"id","content"`
	if x.generates() {
		desc += " Give either the new content, or instructions for the artifact model to change it."
		props += `,"instructions":{"type":"string","maxLength":10000,"description":"What to change"}`
		required = `"id"`
	}
	return parley.ToolSpec{Name: "update_artifact", Description: desc,
		Parameters: json.RawMessage(`{"type":"object","properties":{` + props + `},"required":[` + required + `],"additionalProperties":false}`)}
}

type createArgs struct {
	Type         parley.ArtifactType `json:"type"`
	Title        string              `json:"title"`
	Language     string              `json:"language"`
	Content      string              `json:"content"`
	Instructions string              `json:"instructions"`
}

func (x *executor) create(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
	var args createArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return failed("arguments: %v", err), nil
	}
	ri := tools.RunOf(ctx)
	if ri.SessionID == "" {
		return failed("artifacts can only be made in a conversation"), nil
	}
	if !ValidType(args.Type) {
		return failed("unknown type %q (one of react, html, svg, code, mermaid, markdown)", args.Type), nil
	}
	a := &parley.Artifact{ID: parley.NewID(), SessionID: ri.SessionID, RunID: ri.RunID, Type: args.Type,
		Title: strings.TrimSpace(args.Title), Language: strings.TrimSpace(args.Language)}
	return x.store(ctx, ri, a, args.Content, args.Instructions, "", "create_artifact")
}

type updateArgs struct {
	ID           string `json:"id"`
	Title        string `json:"title"`
	Content      string `json:"content"`
	Instructions string `json:"instructions"`
}

func (x *executor) update(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
	var args updateArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return failed("arguments: %v", err), nil
	}
	ri := tools.RunOf(ctx)
	if ri.SessionID == "" {
		return failed("artifacts can only be changed in a conversation"), nil
	}
	prev, err := x.cfg.Store.GetArtifact(ctx, args.ID, 0)
	if errors.Is(err, parley.ErrNotFound) {
		return failed("there is no artifact %q in this conversation; use the id create_artifact returned", truncate(args.ID, 80)), nil
	}
	if err != nil {
		return nil, err
	}
	if prev.SessionID != ri.SessionID {
		// An artifact of the conversation this one was forked from is shown by the copied
		// messages of both: a new version would change that conversation too.
		inherited := false
		if x.cfg.InLineage != nil {
			if inherited, err = x.cfg.InLineage(ctx, ri.SessionID, prev.SessionID); err != nil {
				return nil, err
			}
		}
		if inherited {
			return failed("artifact %q was made before this conversation was forked and belongs to the conversation it was forked from, which a change would change too; nothing was stored: call create_artifact (type %s) with the changed content to make a new artifact of this conversation", prev.ID, prev.Type), nil
		}
		return failed("there is no artifact %q in this conversation; use the id create_artifact returned", truncate(args.ID, 80)), nil
	}
	a := *prev
	a.RunID = ri.RunID
	if t := strings.TrimSpace(args.Title); t != "" {
		a.Title = t
	}
	return x.store(ctx, ri, &a, args.Content, args.Instructions, prev.Content, "update_artifact")
}

// store writes (or has the artifact model write) the content, processes and validates it, stores
// the new version and tells the run's clients.
func (x *executor) store(ctx context.Context, ri tools.RunInfo, a *parley.Artifact, content, instructions, previous, tool string) (*parley.ToolResult, error) {
	var (
		notes []string
		err   error
	)
	switch {
	case content != "":
		a.Content, notes, err = Process(a.Type, a.Language, content)
		if err != nil {
			return failed("%v. Nothing was stored: correct the content and call %s again.", err, tool), nil
		}
	case instructions != "" && x.generates():
		a.Content, notes, err = x.generate(ctx, a, instructions, previous)
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				return failed("the artifact model's %v. Nothing was stored: write the content yourself or call %s again with clearer instructions.", err, tool), nil
			}
			x.cfg.Log.Warn("artifact model failed", "err", err)
			return failed("the artifact model failed; write the content yourself and call %s again", tool), nil
		}
	case x.generates():
		return failed("give content or instructions"), nil
	default:
		return failed("content is required"), nil
	}
	a.CreatedAt = x.cfg.Now().UTC().Truncate(time.Microsecond)
	if err := x.cfg.Store.AddArtifactVersion(ctx, a); err != nil {
		return nil, fmt.Errorf("storing the artifact: %w", err)
	}
	ri.EmitEvent(parley.Event{Type: parley.EventArtifact, Artifact: a})
	var b strings.Builder
	fmt.Fprintf(&b, "Artifact stored: id %s, version %d, %s %q. The user sees it beside the chat; to change it, call update_artifact with this id.", a.ID, a.Version, a.Type, a.Title)
	if len(notes) > 0 {
		fmt.Fprintf(&b, " Removed as unsafe: %s.", strings.Join(notes, ", "))
	}
	return &parley.ToolResult{Content: parley.Text(b.String()), ResourceID: ""}, nil
}

// generate asks the artifact model for the content, and once more with the validation error
// when its first answer does not pass.
func (x *executor) generate(ctx context.Context, a *parley.Artifact, instructions, previous string) (string, []string, error) {
	user := "Title: " + a.Title + "\n"
	if a.Language != "" {
		user += "Language: " + a.Language + "\n"
	}
	if previous != "" {
		user += "\nThe current version:\n<<<\n" + previous + "\n>>>\n\nChange it as follows, and answer with the whole new version.\n"
	}
	user += "\nInstructions:\n" + instructions
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		prompt := user
		if lastErr != nil {
			prompt += "\n\nYour previous answer was refused: " + lastErr.Error() + ". Answer again, corrected."
		}
		ans, err := x.cfg.Model.Ask(ctx, Prompt(a.Type), prompt)
		if err != nil {
			return "", nil, err
		}
		content, notes, err := Process(a.Type, a.Language, extractCode(ans.Content, a.Type))
		if err == nil {
			return content, notes, nil
		}
		lastErr = err
	}
	return "", nil, lastErr
}

var anyFence = regexp.MustCompile("(?s)```[A-Za-z0-9_+.-]*[ \\t]*\\n(.*?)\\n?```")

// extractCode takes the artifact out of a model's answer that has prose around one fenced block
// (the prompt asks for none; models add it anyway). Markdown keeps its own fences.
func extractCode(answer string, t parley.ArtifactType) string {
	if t == parley.ArtifactMarkdown {
		return answer
	}
	if m := anyFence.FindAllStringSubmatch(answer, 2); len(m) == 1 {
		return m[0][1]
	}
	return answer
}

func failed(format string, args ...any) *parley.ToolResult {
	return &parley.ToolResult{Content: parley.Text("error: " + fmt.Sprintf(format, args...)), IsError: true}
}

// Prompt is the artifact model's system prompt for type t (seed 003 §3's type-specific prompts).
func Prompt(t parley.ArtifactType) string {
	const common = "You write one artifact for a chat application. Answer with the artifact only: no explanation before or after it, at most one code fence around it.\n"
	switch t {
	case parley.ArtifactReact:
		return common + `Write a React component in JSX or TSX.
CRITICAL FORMAT REQUIREMENTS:
- A single ES module whose default export is the component: export default function App() { ... }
- NO HTML document structure: no <!DOCTYPE>, <html>, <head>, <body> or <script> tags, no ReactDOM.render/createRoot call.
- Import only from: ` + strings.Join(AllowedImports, ", ") + `. No other libraries, no CSS files, no network requests (fetch is blocked): inline any data and styles (style props or a <style> element).
- Use hooks imported from "react" (import { useState } from "react").`
	case parley.ArtifactHTML:
		return common + "Write a self-contained HTML page: inline CSS and JavaScript only. It runs in a sandbox without network access: no external scripts, styles, fonts or images (use inline SVG or data: URLs), no fetch."
	case parley.ArtifactSVG:
		return common + `Write one SVG image: a single well-formed <svg xmlns="http://www.w3.org/2000/svg" viewBox="..."> element. No <script>, no event handlers (onclick, onload…), no <foreignObject>, no links or references outside the image (href only to #ids inside it).`
	case parley.ArtifactCode:
		return common + "Write the code in the given language: complete, idiomatic, commented where it helps."
	case parley.ArtifactMermaid:
		return common + "Write a Mermaid diagram. The first line is its type (flowchart TD, sequenceDiagram, classDiagram, stateDiagram-v2, erDiagram, gantt, pie, mindmap, timeline…). Quote labels holding punctuation."
	default:
		return common + "Write a Markdown document with headings, lists and tables where they help."
	}
}
