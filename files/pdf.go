package files

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/ledongthuc/pdf"
	parley "github.com/parleyhq/parley"
)

// maxPDFPages bounds the pages whose text is extracted from one PDF.
const maxPDFPages = 2000

// ExtractPDFText returns up to budget bytes of the text of the PDF in r (size bytes), and whether
// there was more. A malformed PDF is an error, never a panic.
func ExtractPDFText(r io.ReadSeeker, size int64, budget int) (text string, cut bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			text, cut, err = "", false, fmt.Errorf("reading the PDF: %v", p)
		}
	}()
	rd, err := pdf.NewReader(&readerAt{r: r}, size)
	if err != nil {
		return "", false, fmt.Errorf("reading the PDF: %w", err)
	}
	var b strings.Builder
	fonts := map[string]*pdf.Font{}
	n := min(rd.NumPage(), maxPDFPages)
	for i := 1; i <= n; i++ {
		p := rd.Page(i)
		if p.V.IsNull() {
			continue
		}
		for _, name := range p.Fonts() {
			if _, ok := fonts[name]; !ok {
				f := p.Font(name)
				fonts[name] = &f
			}
		}
		t, err := p.GetPlainText(fonts)
		if err != nil {
			return "", false, fmt.Errorf("reading page %d of the PDF: %w", i, err)
		}
		if b.Len() > 0 && t != "" {
			b.WriteString("\n")
		}
		b.WriteString(t)
		if b.Len() > budget {
			return cutUTF8(b.String(), budget), true, nil
		}
	}
	return b.String(), n < rd.NumPage(), nil
}

// readerAt reads at offsets of a ReadSeeker (the blob store gives seekable readers), one read at
// a time.
type readerAt struct {
	mu sync.Mutex
	r  io.ReadSeeker
}

func (a *readerAt) ReadAt(p []byte, off int64) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.r.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.ReadFull(a.r, p)
}

// pdfCache keeps the extracted text of recent PDFs by blob key, so the model calls of a run do
// not extract it again each time.
type pdfCache struct {
	mu    sync.Mutex
	m     map[string]string
	order []string
}

const pdfCacheEntries = 32

func (c *pdfCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[key]
	return t, ok
}

func (c *pdfCache) put(key, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return
	}
	if len(c.order) >= pdfCacheEntries {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[key] = text
	c.order = append(c.order, key)
}

// pdfText returns the model's view of f's text: extracted, cut to the budget with a note.
func (s *Service) pdfText(ctx context.Context, f *parley.File) (string, error) {
	if t, ok := s.pdfs.get(f.SHA256); ok {
		return t, nil
	}
	rd, err := s.Open(ctx, f)
	if err != nil {
		return "", err
	}
	defer rd.Close()
	text, cut, err := ExtractPDFText(rd, rd.Size(), s.cfg.TextBudget)
	if err != nil {
		s.cfg.Log.Warn("files: extracting the text of a PDF", "file", f.ID, "err", err)
		text = "[The text of this PDF could not be extracted.]"
	} else if cut {
		text += fmt.Sprintf("\n[The text was cut: only its first %d bytes are shown.]", s.cfg.TextBudget)
	}
	text = strings.ReplaceAll(text, "\x00", "")
	s.pdfs.put(f.SHA256, text)
	return text, nil
}
