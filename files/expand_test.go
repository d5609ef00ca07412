package files

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files/filestest"
)

var fixedNow = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

func TestExpand(t *testing.T) {
	fx := newFixture(t, Config{TextBudget: 64})
	up := func(name string, data []byte) *parley.File {
		f, err := fx.svc.Upload(ctx, "alice", "", name, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	img := filestest.PNG(3, 3)
	pngFile := up("chart.png", img)
	md := up("notes.md", []byte("# Notes\n\n"+strings.Repeat("lorem ipsum ", 20)))
	pdfFile := up("report.pdf", filestest.PDF("Revenue grew by 12 percent"))
	bin := up("archive.bin", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3})
	deleted := up("gone.txt", []byte("bye"))
	if err := fx.svc.Delete(ctx, "alice", deleted.ID); err != nil {
		t.Fatal(err)
	}
	user := parley.Message{Role: parley.RoleUser, Content: parley.Parts(
		parley.Part{Type: "text", Text: "look at these"},
		Part(pngFile), Part(md), Part(pdfFile), Part(bin), Part(deleted),
	)}
	history := []parley.Message{{Role: parley.RoleSystem, Content: parley.Text("sys")}, user}
	out, err := fx.svc.Expand(ctx, history)
	if err != nil {
		t.Fatal(err)
	}
	if history[1].Content.Parts()[1].Type != "file" {
		t.Fatal("Expand changed the history it was given")
	}
	parts := out[1].Content.Parts()
	var types []string
	for _, p := range parts {
		types = append(types, p.Type)
	}
	if got := strings.Join(types, ","); got != "text,text,image_url,text,text,file,text,text" {
		t.Fatalf("parts %s", got)
	}
	if want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img); parts[2].ImageURL.URL != want {
		t.Fatalf("image part %.60s", parts[2].ImageURL.URL)
	}
	if !strings.Contains(parts[1].Text, `"chart.png"`) {
		t.Fatalf("image label %q", parts[1].Text)
	}
	if !strings.HasPrefix(parts[3].Text, `Attached file "notes.md" (text/markdown`) || !strings.Contains(parts[3].Text, "# Notes") ||
		!strings.Contains(parts[3].Text, "[The file was cut: only its first 64 of") {
		t.Fatalf("text part %q", parts[3].Text)
	}
	doc := parts[5].File
	if doc.Filename != "report.pdf" || doc.FileID != "" || !strings.HasPrefix(doc.FileData, "data:application/pdf;base64,JVBERi0") ||
		!strings.Contains(doc.Text, "Revenue grew by 12 percent") {
		t.Fatalf("document part %+v", doc)
	}
	if !strings.Contains(parts[6].Text, "cannot be given to the model") {
		t.Fatalf("binary part %q", parts[6].Text)
	}
	if !strings.Contains(parts[7].Text, `"gone.txt": it has been deleted`) {
		t.Fatalf("deleted part %q", parts[7].Text)
	}
	// A message without references is passed as it is.
	plain := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}
	if out, _ := fx.svc.Expand(ctx, plain); &out[0] != &plain[0] {
		t.Fatal("a history without references was copied")
	}
}

func TestExpandLargePDFAsText(t *testing.T) {
	fx := newFixture(t, Config{MaxInline: 100})
	f, err := fx.svc.Upload(ctx, "alice", "", "big.pdf", bytes.NewReader(filestest.PDF("Only the text goes")))
	if err != nil {
		t.Fatal(err)
	}
	out, err := fx.svc.Expand(ctx, []parley.Message{{Role: parley.RoleUser, Content: parley.Parts(Part(f))}})
	if err != nil {
		t.Fatal(err)
	}
	parts := out[0].Content.Parts()
	if len(parts) != 1 || parts[0].Type != "text" || !strings.Contains(parts[0].Text, "Only the text goes") {
		t.Fatalf("%+v", parts)
	}
}

// Images that tool results name are shown after each group of tool messages, in a user message;
// the most recent MaxResultImages only.
func TestExpandResultImages(t *testing.T) {
	fx := newFixture(t, Config{})
	png := filestest.PNG(2, 2)
	var ids []string
	for i := 0; i < MaxResultImages+2; i++ {
		f, err := fx.svc.Upload(ctx, "alice", "", "img.png", bytes.NewReader(png))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.ID)
	}
	fx.svc.SetResultImages(func(m parley.Message) ResultImages {
		if m.Name == "img" {
			return ResultImages{FileIDs: []string{m.Content.String()}}
		}
		return ResultImages{}
	})
	tool := func(name, text string) parley.Message {
		return parley.Message{Role: parley.RoleTool, Name: name, Content: parley.Text(text)}
	}
	msgs := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("draw")}, {Role: parley.RoleAssistant}}
	for _, id := range ids[:len(ids)-1] {
		msgs = append(msgs, tool("img", id))
	}
	msgs = append(msgs, tool("other", "x"), parley.Message{Role: parley.RoleAssistant, Content: parley.Text("ok")}, tool("img", ids[len(ids)-1]))
	out, err := fx.svc.Expand(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(msgs)+2 {
		t.Fatalf("%d messages, want %d", len(out), len(msgs)+2)
	}
	count := func(m parley.Message) int {
		n := 0
		for _, p := range m.Content.Parts() {
			if p.Type == "image_url" && strings.HasPrefix(p.ImageURL.URL, "data:image/png;base64,") {
				n++
			}
		}
		return n
	}
	first, last := out[len(msgs)-2], out[len(out)-1]
	if first.Role != parley.RoleUser || count(first) != MaxResultImages-1 || last.Role != parley.RoleUser || count(last) != 1 {
		t.Fatalf("image messages: %+v / %+v", first, last)
	}
	if out[len(msgs)-1].Role != parley.RoleAssistant || msgs[2].Content.IsParts() {
		t.Fatal("the tool messages or their order changed")
	}
}

// A result's inline images (degraded mode) come as image parts, and its text is what the hook
// says (without the base64).
func TestExpandResultInlineImages(t *testing.T) {
	fx := newFixture(t, Config{})
	short := parley.Text(`{"images":[{"degraded":true}]}`)
	fx.svc.SetResultImages(func(m parley.Message) ResultImages {
		return ResultImages{Inline: []string{"data:image/png;base64,AAAA"}, Content: &short}
	})
	msgs := []parley.Message{{Role: parley.RoleAssistant}, {Role: parley.RoleTool, Name: "generate_image", Content: parley.Text(`{"images":[{"degraded":true,"b64_json":"AAAA"}]}`)}}
	out, err := fx.svc.Expand(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[1].Content.String() != short.String() || !strings.Contains(msgs[1].Content.String(), "AAAA") {
		t.Fatalf("%+v", out)
	}
	parts := out[2].Content.Parts()
	if out[2].Role != parley.RoleUser || len(parts) != 3 || parts[2].ImageURL == nil || parts[2].ImageURL.URL != "data:image/png;base64,AAAA" {
		t.Fatalf("%+v", out[2])
	}
}

// A model call whose history has no tool result naming an image (most of them) is given its
// messages as they are, with nothing allocated: no slice of per-message results is made.
func TestExpandWithoutResultImagesAllocatesNothing(t *testing.T) {
	fx := newFixture(t, Config{})
	fx.svc.SetResultImages(func(parley.Message) ResultImages { return ResultImages{} })
	msgs := []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text("be brief")},
		{Role: parley.RoleUser, Content: parley.Text("what time is it?")},
		{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "get_current_time", Arguments: "{}"}}}},
		{Role: parley.RoleTool, ToolCallID: "c1", Content: parley.Text("12:00")},
	}
	var out []parley.Message
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if out, err = fx.svc.Expand(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Expand allocates %v times, want 0", allocs)
	}
	if len(out) != len(msgs) || &out[0] != &msgs[0] {
		t.Error("the messages were not given back as they are")
	}
}
