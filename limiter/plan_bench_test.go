package limiter_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/rules"
	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkCheckPlan is BenchmarkCheck's 10,000 rules with the plan given
// in the call: a plan the rules name, and one nobody defined (decided as
// the default plan).
func BenchmarkCheckPlan(b *testing.B) {
	for _, plan := range []string{"free", "zzz"} {
		b.Run("plan="+plan, func(b *testing.B) {
			st, err := memory.New(memory.Config{SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			ix, err := rules.Compile(bigSet(10000))
			if err != nil {
				b.Fatal(err)
			}
			l := limiter.New(st, limiter.Config{})
			l.SetRules(ix)
			users := make([]string, 1024)
			for i := range users {
				users[i] = fmt.Sprintf("u%06d", i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := limiter.Request{User: users[i&1023], Plan: plan, Method: "GET", Path: "/api/v1/profile"}
				d, err := l.Check(ctx, &req)
				if err != nil || d.Matched != 1 || d.Plan != "free" {
					b.Fatalf("Check = %+v, %v; want plan free, 1 rule matched", d, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
