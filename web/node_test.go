package web

import (
	"os"
	"os/exec"
	"testing"
)

// TestClientUnits runs the UI's own unit tests (test/*.test.ts: the display rule for streamed
// text, which every client must follow) with node. Without node or web/node_modules it skips,
// unless PARLEY_TEST_REQUIRE_BROWSER=1 (CI sets it).
func TestClientUnits(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("node_modules/vite")
	}
	if err != nil {
		if os.Getenv("PARLEY_TEST_REQUIRE_BROWSER") == "1" {
			t.Fatalf("PARLEY_TEST_REQUIRE_BROWSER=1 but node or web/node_modules is missing: %v", err)
		}
		t.Skipf("skipping the UI's unit tests: node or web/node_modules is missing (npm ci in web/): %v", err)
	}
	out, err := exec.Command(node, "scripts/unit.mjs").CombinedOutput()
	if err != nil {
		t.Fatalf("node scripts/unit.mjs: %v\n%s", err, out)
	}
}
