package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The deployment files live at the repository's root and in deploy/.
const repoRoot = "../.."

// composeService is what the tests read of a compose service.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// serveEnvNames are the PARLEY_* variables `parley serve` reads (one per flag).
func serveEnvNames() map[string]bool {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c config
	serveFlags(fs, &c)
	names := map[string]bool{"PARLEY_CONFIG": true}
	fs.VisitAll(func(f *flag.Flag) { names[envName(f.Name)] = true })
	return names
}

// compose.yaml, read as YAML (anchors and merge keys resolved): PostgreSQL, Redis, a one-shot
// migration, two Parley instances and nginx in front of them on one published port, with the
// health checks and start order promised in README.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Compose's interpolation, with every variable unset: ${VAR:-default} is its default.
	b = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`).ReplaceAll(b, []byte("$1"))
	var doc struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	svc := func(name string) composeService {
		t.Helper()
		s, ok := doc.Services[name]
		if !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
		return s
	}
	if len(doc.Services) != 6 {
		t.Errorf("services: %d, want postgres, redis, migrate, parley1, parley2 and proxy", len(doc.Services))
	}
	for _, name := range []string{"postgres", "redis", "parley1", "parley2", "proxy"} {
		if s := svc(name); s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 {
			t.Errorf("%s has no health check", name)
		}
	}
	if _, ok := doc.Volumes["pgdata"]; !ok || !strings.HasPrefix(strings.Join(svc("postgres").Volumes, " "), "pgdata:") {
		t.Errorf("PostgreSQL's data is not on the named volume pgdata")
	}
	// One port for everything: the proxy's.
	for name, s := range doc.Services {
		if name != "proxy" && len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only the proxy should", name, s.Ports)
		}
	}
	if p := svc("proxy").Ports; len(p) != 1 || !strings.HasSuffix(p[0], ":80") {
		t.Errorf("the proxy publishes %v, want one port to its 80", p)
	}
	if m := svc("migrate"); strings.Join(m.Command, " ") != "migrate up" || m.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("migrate: command %v, depends on %v", m.Command, m.DependsOn)
	}
	known := serveEnvNames()
	ids := map[string]bool{}
	for _, name := range []string{"parley1", "parley2"} {
		s := svc(name)
		env := s.Environment
		if strings.Join(s.Command, " ") != "serve" || s.Build == nil {
			t.Errorf("%s: command %v, build %v", name, s.Command, s.Build)
		}
		for k := range env {
			if strings.HasPrefix(k, "PARLEY_") && !known[k] {
				t.Errorf("%s sets %s, which no flag of parley serve reads", name, k)
			}
		}
		if u, err := url.Parse(env["PARLEY_DATABASE_URL"]); err != nil || u.Scheme != "postgres" || u.Hostname() != "postgres" {
			t.Errorf("%s: PARLEY_DATABASE_URL %q is not the postgres service", name, env["PARLEY_DATABASE_URL"])
		}
		if u, err := url.Parse(env["PARLEY_REDIS_URL"]); err != nil || u.Scheme != "redis" || u.Hostname() != "redis" {
			t.Errorf("%s: PARLEY_REDIS_URL %q is not the redis service", name, env["PARLEY_REDIS_URL"])
		}
		for k, want := range map[string]string{"PARLEY_ADDR": "0.0.0.0:8080", "PARLEY_MIGRATE": "false",
			"PARLEY_REAL_IP_HEADER": "X-Forwarded-For", "PARLEY_MAX_CONNS_PER_ADDR": "0", "PARLEY_AUTH": "keys"} {
			if env[k] != want {
				t.Errorf("%s: %s = %q, want %q", name, k, env[k], want)
			}
		}
		if id := env["PARLEY_INSTANCE_ID"]; id == "" || ids[id] {
			t.Errorf("%s: PARLEY_INSTANCE_ID %q is empty or shared", name, id)
		} else {
			ids[id] = true
		}
		for dep, cond := range map[string]string{"postgres": "service_healthy", "redis": "service_healthy", "migrate": "service_completed_successfully"} {
			if s.DependsOn[dep].Condition != cond {
				t.Errorf("%s: depends on %s with %q, want %q", name, dep, s.DependsOn[dep].Condition, cond)
			}
		}
		if hc := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(hc, "parley healthcheck") || !strings.Contains(hc, "/readyz") {
			t.Errorf("%s: health check %q, want parley healthcheck of /readyz", name, hc)
		}
		if svc("proxy").DependsOn[name].Condition != "service_healthy" {
			t.Errorf("the proxy does not wait for %s to be healthy", name)
		}
	}
	// The proxy's configuration is mounted from deploy/ and names both instances.
	var conf string
	for _, v := range svc("proxy").Volumes {
		if src, dst, ok := strings.Cut(v, ":"); ok && strings.HasPrefix(dst, "/etc/nginx/") {
			conf = filepath.Join(repoRoot, src)
		}
	}
	if conf == "" {
		t.Fatal("the proxy mounts no nginx configuration")
	}
	checkNginxConf(t, conf, "parley1:8080", "parley2:8080")

	t.Run("docker compose config", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// The compose plugin (docker compose) or the standalone docker-compose.
		var compose []string
		if _, err := exec.LookPath("docker"); err == nil {
			if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err == nil {
				compose = []string{"docker", "compose"}
			} else {
				t.Logf("docker compose: %v: %s", err, firstLine(out))
			}
		}
		if compose == nil {
			if _, err := exec.LookPath("docker-compose"); err == nil {
				compose = []string{"docker-compose"}
			}
		}
		if compose == nil {
			t.Skip("neither docker compose nor docker-compose is available here: compose.yaml was checked as YAML only")
		}
		cmd := exec.CommandContext(ctx, compose[0], append(compose[1:], "-f", "compose.yaml", "config", "--quiet")...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s config: %v\n%s", strings.Join(compose, " "), err, out)
		}
	})
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// checkNginxConf checks the settings streams need: the upstreams, HTTP/1.1 with the Upgrade and
// Connection headers (WebSocket), no buffering and long read timeouts (SSE), and the client's
// address in X-Forwarded-For, overwritten.
func checkNginxConf(t *testing.T, path string, upstreams ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	directives := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ";"))
		if f := strings.Fields(line); len(f) > 1 {
			directives[f[0]] = append(directives[f[0]], strings.Join(f[1:], " "))
		}
	}
	has := func(name, value string) bool {
		for _, v := range directives[name] {
			if v == value || strings.HasPrefix(v, value+" ") {
				return true
			}
		}
		return false
	}
	for _, u := range upstreams {
		if !has("server", u) {
			t.Errorf("%s: no upstream server %s", path, u)
		}
	}
	for _, d := range [][2]string{
		{"proxy_http_version", "1.1"},
		{"proxy_set_header", "Upgrade $http_upgrade"},
		{"proxy_set_header", "Connection $connection_upgrade"},
		{"proxy_set_header", "X-Forwarded-For $remote_addr"},
		{"proxy_buffering", "off"},
		{"proxy_cache", "off"},
	} {
		if !has(d[0], d[1]) {
			t.Errorf("%s: no %s %s", path, d[0], d[1])
		}
	}
	for _, d := range []string{"proxy_read_timeout", "proxy_send_timeout"} {
		v := directives[d]
		if len(v) != 1 {
			t.Errorf("%s: %s %v", path, d, v)
			continue
		}
		dur, err := time.ParseDuration(v[0])
		if err != nil || dur < 10*time.Minute {
			t.Errorf("%s: %s %s, want at least 10m (streams stay open)", path, d, v[0])
		}
	}
}

// The Dockerfile: a build stage that makes a static binary (CGO_ENABLED=0), a small final image
// that runs it as a non-root user with a health check; and the module builds without cgo.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms, users []string
	var healthcheck, build string
	// Lines joined across backslash continuations.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
		case "USER":
			users = append(users, f[1])
		case "HEALTHCHECK":
			healthcheck = line
		case "RUN":
			if strings.Contains(line, "go build") {
				build = line
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM lines %v: want a build stage and a final stage", froms)
	}
	final := froms[len(froms)-1]
	if !strings.Contains(final, "distroless/static") && !strings.Contains(final, "alpine") && final != "scratch" {
		t.Errorf("the final image %s is not a small base", final)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "./cmd/parley") {
		t.Errorf("the build step %q does not make a static binary of ./cmd/parley", build)
	}
	if len(users) == 0 || users[len(users)-1] == "root" || strings.HasPrefix(users[len(users)-1], "0") {
		t.Errorf("the image runs as %v, want a non-root user", users)
	}
	if !strings.Contains(healthcheck, "healthcheck") || !strings.Contains(healthcheck, "/readyz") {
		t.Errorf("HEALTHCHECK %q", healthcheck)
	}
	if testing.Short() {
		return
	}
	// Every package of the binary builds without cgo (the SQLite driver is pure Go).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", "./cmd/parley")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list with CGO_ENABLED=0: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("packages that need cgo: %s", s)
	}
}

// deploy/parley.service: runs `parley serve` sandboxed, with its state in /var/lib/parley, and
// gives the shutdown grace time; systemd-analyze verify accepts it where systemd is installed.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join(repoRoot, "deploy", "parley.service")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	one := func(k string) string {
		if v := keys[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	exec0 := one("Service.ExecStart")
	if !strings.Contains(exec0, "parley serve") || !strings.Contains(exec0, "--db /var/lib/parley/") {
		t.Errorf("ExecStart %q", exec0)
	}
	for k, want := range map[string]string{
		"Service.DynamicUser": "yes", "Service.StateDirectory": "parley", "Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem": "strict", "Service.ProtectHome": "yes", "Service.PrivateTmp": "yes",
		"Service.PrivateDevices": "yes", "Service.CapabilityBoundingSet": "", "Service.RestrictSUIDSGID": "yes",
		"Service.Restart": "on-failure", "Service.KillSignal": "SIGTERM", "Install.WantedBy": "multi-user.target",
	} {
		if _, set := keys[k]; !set || one(k) != want {
			t.Errorf("%s = %q, want %q", k, one(k), want)
		}
	}
	if d, err := time.ParseDuration(one("Service.TimeoutStopSec")); err != nil || d <= 30*time.Second {
		t.Errorf("TimeoutStopSec %q: want more than the 30s shutdown grace", one("Service.TimeoutStopSec"))
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed: the unit was checked as text only")
	}
	// verify wants ExecStart's program to exist: this test binary stands in for parley.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "parley.service")
	os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/parley"), []byte(self)), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "systemd-analyze", "verify", unit)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err = cmd.Run()
	if bad := regexp.MustCompile(`(?m)^.*(Unknown|Invalid|Failed|not executable|bad-setting).*$`).FindString(stderr.String()); err != nil || bad != "" {
		t.Errorf("systemd-analyze verify: %v %s\n%s", err, bad, stderr.String())
	}
}
