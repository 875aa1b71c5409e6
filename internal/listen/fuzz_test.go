package listen_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/listen"
)

// FuzzTokens: any --data-token value either is refused or parses to
// tokens each of which is accepted as "Bearer <token>"; any Authorization
// header is accepted only when it carries one of them.
func FuzzTokens(f *testing.F) {
	f.Add("old,new", "Bearer new")
	f.Add(" a , b ", "bearer a")
	f.Add(",", "Bearer ")
	f.Add("x", "Basic x")
	f.Fuzz(func(t *testing.T, flag, header string) {
		tok, err := listen.ParseTokens("--data-token", flag)
		if err != nil {
			if !strings.Contains(err.Error(), "--data-token") {
				t.Fatalf("ParseTokens(%q) = %v, an error that does not name the flag", flag, err)
			}
			return
		}
		want := map[string]bool{}
		for e := range strings.SplitSeq(flag, ",") {
			if e = strings.TrimSpace(e); e != "" {
				want[e] = true
				if !tok.Valid("Bearer " + e) {
					t.Fatalf("ParseTokens(%q) does not accept its token %q", flag, e)
				}
			}
		}
		if tok.Set() != (len(want) > 0) {
			t.Fatalf("ParseTokens(%q).Set() = %v with tokens %v", flag, tok.Set(), want)
		}
		scheme, got, _ := strings.Cut(header, " ")
		if tok.Valid(header) && (!strings.EqualFold(scheme, "Bearer") || !want[strings.TrimSpace(got)]) {
			t.Fatalf("tokens %q accepted Authorization %q", flag, header)
		}
	})
}
