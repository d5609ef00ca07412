package openai

import (
	"testing"

	"github.com/parleyhq/parley/provider/internal/golden"
)

func checkGolden(t *testing.T, path string, got []byte) { t.Helper(); golden.Check(t, path, got) }

func indentJSON(t *testing.T, v any) []byte { t.Helper(); return golden.JSON(t, v) }
