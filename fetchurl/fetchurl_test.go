package fetchurl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/fetchurl"
	"github.com/parleyhq/parley/tools"
)

// The fake web server listens on 127.0.0.2, the one address the tests allow besides the public
// ones: every other loopback, private or metadata address stays refused, as in production.
var fakeAddr = netip.MustParseAddr("127.0.0.2")

func allowFake(a netip.Addr) bool { return a == fakeAddr || fetchurl.Public(a) }

func newWeb(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

const article = `<!DOCTYPE html><html><head><title>Gophers in the wild</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Gophers in the wild</h1>
<p>Gophers are small burrowing rodents. They live in North and Central America and spend most of their lives underground, digging long tunnels.</p>
<p>A gopher's cheek pouches carry food back to its burrow. The pouches are fur-lined and can be turned inside out for cleaning, which is unusual among rodents.</p>
<p>Their tunnels aerate the soil, which is good for plants, though gardeners rarely agree that the trade is a fair one for them.</p>
</article>
<footer>Copyright 2026 Example. All rights reserved.</footer>
<script>document.cookie</script></body></html>`

func tool(t *testing.T, cfg fetchurl.Config) func(url string) tools.Outcome {
	reg := tools.NewRegistry()
	if err := reg.Register(fetchurl.Tool(fetchurl.New(cfg))); err != nil {
		t.Fatal(err)
	}
	return func(u string) tools.Outcome {
		return reg.Call(context.Background(), parley.ToolCall{ID: "c1", Type: "function",
			Function: parley.FunctionCall{Name: "fetch_url", Arguments: fmt.Sprintf(`{"url":%q}`, u)}}, nil)
	}
}

func TestFetchReadsTheArticle(t *testing.T) {
	web := newWeb(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/gophers", http.StatusFound)
		case "/gophers":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, article)
		case "/data.json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"ok":true}`)
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("a", 5000))
		case "/image":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG"))
		default:
			http.NotFound(w, r)
		}
	}))
	fetch := tool(t, fetchurl.Config{AllowForTests: allowFake, MaxBytes: 4096})
	out := fetch(web.URL + "/moved")
	text := out.Content.String()
	if !out.Success || !strings.Contains(text, "Title: Gophers in the wild") || !strings.Contains(text, "cheek pouches") ||
		!strings.Contains(text, "URL: "+web.URL+"/gophers") || strings.Contains(text, "document.cookie") {
		t.Fatalf("page (success %v):\n%s", out.Success, text)
	}
	if out := fetch(web.URL + "/data.json"); !out.Success || !strings.HasSuffix(out.Content.String(), `{"ok":true}`) {
		t.Fatalf("json: %s", out.Content.String())
	}
	if out := fetch(web.URL + "/big"); !out.Success || !strings.Contains(out.Content.String(), "cut at the size limit") || strings.Count(out.Content.String(), "a") > 4200 {
		t.Fatalf("big: %d bytes", len(out.Content.String()))
	}
	if out := fetch(web.URL + "/image"); out.Success || !strings.Contains(out.Content.String(), "image/png") {
		t.Fatalf("image: %s", out.Content.String())
	}
	if out := fetch(web.URL + "/missing"); out.Success || !strings.Contains(out.Content.String(), "404") {
		t.Fatalf("missing: %s", out.Content.String())
	}
}

func TestFetchTimesOut(t *testing.T) {
	release := make(chan struct{})
	web := newWeb(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // holds the answer until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	fetch := tool(t, fetchurl.Config{AllowForTests: allowFake, Timeout: 300 * time.Millisecond})
	if out := fetch(web.URL + "/slow"); out.Success || !strings.Contains(out.Content.String(), "Timeout") {
		t.Fatalf("slow page: %s", out.Content.String())
	}
}

func TestFetchRefusesPrivateAddresses(t *testing.T) {
	// An allowed server that redirects wherever it is told.
	web := newWeb(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	}))
	// A listener on 127.0.0.1 that must never be reached.
	var reached = make(chan string, 16)
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.String()
		fmt.Fprint(w, "internal secrets")
	}))
	defer inner.Close()
	_, innerPort, _ := net.SplitHostPort(inner.Listener.Addr().String())

	names := map[string][]netip.Addr{
		"evil.example":     {netip.MustParseAddr("10.1.2.3")},
		"metadata.example": {netip.MustParseAddr("169.254.169.254")},
		"loop.example":     {netip.MustParseAddr("127.0.0.1")},
		"mixed.example":    {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")}, // one bad answer refuses the name
		"v6.example":       {netip.MustParseAddr("::ffff:127.0.0.1")},
	}
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := names[host]; ok {
			return a, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	fetch := tool(t, fetchurl.Config{AllowForTests: allowFake, LookupIP: lookup})
	cases := []struct{ name, url, reason string }{
		{"loopback", "http://127.0.0.1:" + innerPort + "/", "127.0.0.1 is not a public address"},
		{"loopback ipv6", "http://[::1]:" + innerPort + "/", "::1 is not a public address"},
		{"mapped ipv6", "http://[::ffff:127.0.0.1]:" + innerPort + "/", "not a public address"},
		{"metadata", "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is not a public address"},
		{"private 10/8", "http://10.0.0.1/", "10.0.0.1 is not a public address"},
		{"private 10/8 high", "http://10.255.255.254:8080/admin", "10.255.255.254 is not a public address"},
		{"unspecified", "http://0.0.0.0:" + innerPort + "/", "0.0.0.0 is not a public address"},
		{"localhost name", "http://localhost:" + innerPort + "/", "localhost is this machine"},
		{"name resolving to private", "http://evil.example/", "evil.example resolves to 10.1.2.3"},
		{"name resolving to metadata", "http://metadata.example/", "resolves to 169.254.169.254"},
		{"name resolving to loopback", "http://loop.example:" + innerPort + "/", "resolves to 127.0.0.1"},
		{"name with one private answer", "http://mixed.example:" + innerPort + "/", "resolves to 127.0.0.1"},
		{"name resolving to mapped loopback", "http://v6.example:" + innerPort + "/", "resolves to ::ffff:127.0.0.1"},
		{"redirect to private", web.URL + "/?to=http://10.0.0.1/", "10.0.0.1 is not a public address"},
		{"redirect to loopback", web.URL + "/?to=http://127.0.0.1:" + innerPort + "/", "127.0.0.1 is not a public address"},
		{"redirect to a name resolving to private", web.URL + "/?to=http://evil.example/", "resolves to 10.1.2.3"},
		{"redirect to metadata", web.URL + "/?to=http://169.254.169.254/latest/", "169.254.169.254 is not a public address"},
		{"scheme", "file:///etc/passwd", "only http and https"},
		{"redirect to another scheme", web.URL + "/?to=file:///etc/passwd", "only http and https"},
		{"credentials", "http://user:pw@evil.example/", "credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := fetch(c.url)
			text := out.Content.String()
			if out.Success || !strings.HasPrefix(text, "error: fetch_url refused") || !strings.Contains(text, c.reason) {
				t.Fatalf("result (success %v): %s\nwant a refusal with %q", out.Success, text, c.reason)
			}
		})
	}
	select {
	case u := <-reached:
		t.Fatalf("the private server was reached: %s", u)
	default:
	}
}

func TestPublic(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "93.184.215.14": true, "2606:4700:4700::1111": true,
		"127.0.0.1": false, "127.255.0.1": false, "::1": false, "0.0.0.0": false, "::": false,
		"10.0.0.1": false, "172.16.0.1": false, "172.31.255.255": false, "192.168.1.1": false,
		"169.254.169.254": false, "169.254.0.1": false, "fe80::1": false, "100.100.100.200": false, "100.64.0.1": false,
		"fd00:ec2::254": false, "fc00::1": false, "224.0.0.1": false, "ff02::1": false, "255.255.255.255": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::ffff:169.254.169.254": false, "::ffff:8.8.8.8": true,
		"64:ff9b::a00:1": false, "64:ff9b::808:808": true, "2002:a00:1::": false, "2002:808:808::": true,
		"::127.0.0.1": false, "192.0.0.1": false, "198.18.0.1": false,
	} {
		if got := fetchurl.Public(netip.MustParseAddr(s)); got != want {
			t.Errorf("Public(%s) = %v, want %v", s, got, want)
		}
	}
}

// The dialer checks the address it connects to even when the name's check was passed: a
// resolver that answers differently the second time (rebinding) does not get a connection to a
// private address, because the connection goes to the address that was checked.
func TestFetchDialsTheCheckedAddress(t *testing.T) {
	web := newWeb(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "public page")
	}))
	_, port, _ := net.SplitHostPort(web.Listener.Addr().String())
	calls := 0
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		calls++
		if calls == 1 {
			return []netip.Addr{fakeAddr}, nil // passes the check
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // a rebinding answer
	}
	f := fetchurl.New(fetchurl.Config{AllowForTests: allowFake, LookupIP: lookup})
	p, err := f.Fetch(context.Background(), "http://rebind.example:"+port+"/")
	if err != nil || p.Text != "public page" || calls != 1 {
		t.Fatalf("page %+v, err %v, lookups %d", p, err, calls)
	}
	if _, err := fetchurl.New(fetchurl.Config{LookupIP: lookup}).Fetch(context.Background(), "http://rebind.example:"+port+"/"); !errors.Is(err, fetchurl.ErrRefused) {
		t.Fatalf("without the test rule: %v", err)
	}
}
