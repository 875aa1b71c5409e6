// Command apicount counts the exported names of the module's public
// packages: every package outside internal/, bench/, cmd/ and e2e/.
//
//	go run ./scripts/apicount        # one line a package, then the total
//
// A name is an exported top-level func, type, const or var, or an exported
// method of an exported type; exported fields of exported struct types are
// counted apart. Test files are left out. It reads the source with go/ast
// and needs nothing but the Go toolchain.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// count is one package's tally.
type count struct {
	names, fields int
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	counts := map[string]*count{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch first, _, _ := strings.Cut(filepath.ToSlash(rel), "/"); first {
			case "internal", "bench", "cmd", "e2e", "scripts", "testdata", "docs":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		c := counts[dir]
		if c == nil {
			c = &count{}
			counts[dir] = c
		}
		tally(f, c)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(counts))
	for d := range counts {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool {
		if counts[dirs[i]].names != counts[dirs[j]].names {
			return counts[dirs[i]].names > counts[dirs[j]].names
		}
		return dirs[i] < dirs[j]
	})
	var total count
	fmt.Printf("%-24s %8s %8s\n", "package", "exported", "fields")
	for _, d := range dirs {
		c := counts[d]
		fmt.Printf("%-24s %8d %8d\n", d, c.names, c.fields)
		total.names += c.names
		total.fields += c.fields
	}
	fmt.Printf("%-24s %8d %8d\n", "total", total.names, total.fields)
}

// tally adds one file's exported names to c.
func tally(f *ast.File, c *count) {
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if !decl.Name.IsExported() {
				continue
			}
			if decl.Recv == nil || receiverExported(decl.Recv.List[0].Type) {
				c.names++
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					if !spec.Name.IsExported() {
						continue
					}
					c.names++
					if st, ok := spec.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							for _, name := range field.Names {
								if name.IsExported() {
									c.fields++
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, name := range spec.Names {
						if name.IsExported() {
							c.names++
						}
					}
				}
			}
		}
	}
}

// receiverExported reports whether a method's receiver type is exported.
func receiverExported(t ast.Expr) bool {
	for {
		switch e := t.(type) {
		case *ast.StarExpr:
			t = e.X
		case *ast.IndexExpr:
			t = e.X
		case *ast.IndexListExpr:
			t = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return false
		}
	}
}
