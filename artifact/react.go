package artifact

import (
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
	parley "github.com/parleyhq/parley"
)

// vendor holds the production CommonJS builds of React 19.3.1, ReactDOM 19.3.1 and Scheduler
// 0.28.0 from npm, with their MIT licences: a React artifact is bundled with them on the server,
// so the page it runs in loads nothing from anywhere.
//
//go:embed vendor/*.js vendor/LICENSE-*
var vendor embed.FS

// vendorFiles maps each module an artifact may import (and the ones those import) to its file.
var vendorFiles = map[string]string{
	"react":             "vendor/react.production.js",
	"react/jsx-runtime": "vendor/react-jsx-runtime.production.js",
	"react-dom":         "vendor/react-dom.production.js",
	"react-dom/client":  "vendor/react-dom-client.production.js",
	"scheduler":         "vendor/scheduler.production.js",
}

const (
	nsArtifact = "parley-artifact"
	nsVendor   = "parley-vendor"
	entryPath  = "artifact.tsx"
)

// checkReact parses src as a TSX module with esbuild and checks its imports against
// AllowedImports and that it has a default export (the component).
func checkReact(src string) error {
	js, err := stripTypes(src)
	if err != nil {
		return err
	}
	res := api.Build(buildOptions(js, false))
	if err := reactErrors(res.Errors); err != nil {
		return err
	}
	var meta struct {
		Outputs map[string]struct {
			Exports []string `json:"exports"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(res.Metafile), &meta); err != nil {
		return fmt.Errorf("artifact: reading esbuild's metafile: %w", err)
	}
	for _, o := range meta.Outputs {
		if !slices.Contains(o.Exports, "default") {
			return invalid(parley.ArtifactReact, "the component must be the module's default export (export default function App() { … })")
		}
	}
	return nil
}

// reactErrors turns esbuild's errors into one ValidationError the model can act on: each with
// its line and column in the component.
func reactErrors(msgs []api.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var b strings.Builder
	for i, m := range msgs {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(msgs)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		if l := m.Location; l != nil && l.Line > 0 {
			fmt.Fprintf(&b, "line %d, column %d: %s", l.Line, l.Column+1, m.Text)
			if t := strings.TrimSpace(l.LineText); t != "" {
				fmt.Fprintf(&b, " (in %q)", truncate(t, 80))
			}
		} else {
			b.WriteString(m.Text)
		}
	}
	return invalid(parley.ArtifactReact, "%s", b.String())
}

// Compile bundles a React artifact with the React Parley ships into one script that renders its
// default export into #root.
func Compile(src string) (string, error) {
	js, err := stripTypes(src)
	if err != nil {
		return "", err
	}
	res := api.Build(buildOptions(js, true))
	if err := reactErrors(res.Errors); err != nil {
		return "", err
	}
	if len(res.OutputFiles) != 1 {
		return "", fmt.Errorf("artifact: esbuild made %d files", len(res.OutputFiles))
	}
	return string(res.OutputFiles[0].Contents), nil
}

// stripTypes parses src as TSX and returns it as JSX without its types. Imports are kept as
// written (TypeScript would drop an unused one), so that every one of them is checked; only
// "import type" goes.
func stripTypes(src string) (string, error) {
	res := api.Transform(src, api.TransformOptions{
		Loader:      api.LoaderTSX,
		JSX:         api.JSXPreserve,
		Format:      api.FormatESModule,
		Sourcefile:  entryPath,
		LogLevel:    api.LogLevelSilent,
		TsconfigRaw: `{"compilerOptions":{"verbatimModuleSyntax":true}}`,
	})
	if err := reactErrors(res.Errors); err != nil {
		return "", err
	}
	return string(res.Code), nil
}

const mountScript = `import { createRoot } from "react-dom/client";
import { createElement } from "react";
import App from "parley:artifact";
createRoot(document.getElementById("root")).render(createElement(App));
`

// buildOptions are esbuild's options for checking (bundle false: imports stay external, only
// checked) or for compiling the page's script (bundle: the mount code, the artifact and React).
func buildOptions(src string, bundle bool) api.BuildOptions {
	plugin := api.Plugin{Name: "parley", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: `.*`}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			if a.Path == "parley:artifact" {
				return api.OnResolveResult{Path: entryPath, Namespace: nsArtifact}, nil
			}
			if a.Namespace == nsVendor {
				if f, ok := vendorFiles[a.Path]; ok {
					return api.OnResolveResult{Path: f, Namespace: nsVendor}, nil
				}
				return api.OnResolveResult{}, fmt.Errorf("vendored module %q not shipped", a.Path)
			}
			if !slices.Contains(AllowedImports, a.Path) {
				return api.OnResolveResult{Errors: []api.Message{{Text: fmt.Sprintf(
					"import %q is not allowed: an artifact may import only %s, and runs without network access (inline any other code)",
					a.Path, strings.Join(AllowedImports, ", "))}}}, nil
			}
			if !bundle {
				return api.OnResolveResult{Path: a.Path, External: true}, nil
			}
			return api.OnResolveResult{Path: vendorFiles[a.Path], Namespace: nsVendor}, nil
		})
		b.OnLoad(api.OnLoadOptions{Filter: `.*`, Namespace: nsArtifact}, func(api.OnLoadArgs) (api.OnLoadResult, error) {
			return api.OnLoadResult{Contents: &src, Loader: api.LoaderJSX}, nil
		})
		b.OnLoad(api.OnLoadOptions{Filter: `.*`, Namespace: nsVendor}, func(a api.OnLoadArgs) (api.OnLoadResult, error) {
			data, err := vendor.ReadFile(a.Path)
			if err != nil {
				return api.OnLoadResult{}, err
			}
			s := string(data)
			return api.OnLoadResult{Contents: &s, Loader: api.LoaderJS}, nil
		})
	}}
	opts := api.BuildOptions{
		Bundle:      true,
		Write:       false,
		Format:      api.FormatESModule,
		Target:      api.ES2020,
		JSX:         api.JSXAutomatic,
		Platform:    api.PlatformBrowser,
		Metafile:    true,
		LogLevel:    api.LogLevelSilent,
		Plugins:     []api.Plugin{plugin},
		Outfile:     "out.js",
		EntryPoints: []string{"parley:artifact"},
	}
	if bundle {
		opts.EntryPoints = nil
		opts.Stdin = &api.StdinOptions{Contents: mountScript, Loader: api.LoaderJS, Sourcefile: "mount.js"}
		opts.Format = api.FormatIIFE
		opts.Define = map[string]string{"process.env.NODE_ENV": `"production"`}
		opts.MinifySyntax, opts.MinifyWhitespace, opts.MinifyIdentifiers = true, true, true
		opts.Metafile = false
	}
	return opts
}
