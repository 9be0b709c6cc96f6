package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

// loadAPI type-checks the packages of the module at dir and returns the
// ones whose API is checked: the module's packages outside internal/,
// cmd/ and examples/, and no main package. Nested modules are not part of
// the module, so ./... leaves them out.
func loadAPI(dir string) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:  dir,
		// A go.work file above the tree must not change what is loaded.
		Env: append(os.Environ(), "GOWORK=off"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("loading the packages in %s: %w", dir, err)
	}
	var mod apidiff.Module
	var errs []string
	for _, p := range pkgs {
		if p.Module == nil || !p.Module.Main {
			continue
		}
		if mod.Path == "" {
			mod.Path = p.Module.Path
		}
		if p.Name == "main" || !checked(p.Module.Path, p.PkgPath) {
			continue
		}
		// Only a checked package's errors stop the check: a broken
		// command or example has no API to compare.
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		mod.Packages = append(mod.Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("the packages in %s do not load:\n%s", dir, strings.Join(errs, "\n"))
	}
	if len(mod.Packages) == 0 {
		return nil, fmt.Errorf("no package to check in %s", dir)
	}
	return &mod, nil
}

// checked reports whether the package at path, in the module at modPath,
// has its API checked: not an internal package (which no other module can
// import), and not under cmd/ or examples/ (programs, not library API).
func checked(modPath, path string) bool {
	rel, ok := strings.CutPrefix(path, modPath)
	if !ok || (rel != "" && rel[0] != '/') {
		return false
	}
	elems := strings.Split(strings.TrimPrefix(rel, "/"), "/")
	if elems[0] == "cmd" || elems[0] == "examples" {
		return false
	}
	for _, e := range elems {
		if e == "internal" {
			return false
		}
	}
	return true
}

// names returns the paths of the packages of m.
func names(m *apidiff.Module) []string {
	var s []string
	for _, p := range m.Packages {
		s = append(s, p.Path())
	}
	return s
}
