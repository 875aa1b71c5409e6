package limiter_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/limiter"
)

// BenchmarkCheckPlan is BenchmarkCheck's 10,000 rules with the plan given
// in the call: a plan the rules name, and one nobody defined (decided as
// the default plan).
func BenchmarkCheckPlan(b *testing.B) {
	for _, plan := range []string{"free", "zzz"} {
		b.Run("plan="+plan, func(b *testing.B) {
			l, users := benchLimiter(b, 10000), benchUsers(0)
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
