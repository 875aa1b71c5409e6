package conformance

// The charge tables (algorithm.Params.Charge): a call of cost > 0 is a
// charge for work already done, taken in full, into debt where it does
// not fit; a call of cost 0 is the check before the work, decided as
// always. Envoy's apply_on_stream_done with a hits_addend: 0 check before
// it, the way AI gateways count tokens.

// huge is a cost past every bound: counted as algorithm.maxCharge.
const huge = 1 << 32

var tokenBucketCharge = []Case{
	{
		Name:   "charge: into debt, checks denied until it is paid",
		Params: charged(tb, 10, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 10, ResetAfter: 0},
			{At: 0, Cost: 4, Allowed: true, Remaining: 6, ResetAfter: 400 * Millisecond},
			{At: 0, Peek: true, Allowed: true, Remaining: 6, ResetAfter: 400 * Millisecond},
			{At: 0, Cost: 4, Allowed: true, Remaining: 2, ResetAfter: 800 * Millisecond},
			{At: 0, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 800 * Millisecond},
			// Does not fit: taken all the same, 2 tokens of debt.
			{At: 0, Cost: 4, Remaining: 0, RetryAfter: 300 * Millisecond, ResetAfter: 1200 * Millisecond},
			{At: 0, Peek: true, Remaining: 0, RetryAfter: 200 * Millisecond, ResetAfter: 1200 * Millisecond},
			{At: 199999, Peek: true, Remaining: 0, RetryAfter: 1, ResetAfter: 1000001},
			{At: 200 * Millisecond, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			// Every call of cost > 0 is a charge.
			{At: 200 * Millisecond, Cost: 1, Remaining: 0, RetryAfter: 200 * Millisecond, ResetAfter: 1100 * Millisecond},
			{At: 400 * Millisecond, Cost: 1, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "charge: above capacity, and bounded",
		Params: charged(tb, 10, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 25, Remaining: 0, RetryAfter: 1600 * Millisecond, ResetAfter: 2500 * Millisecond},
			{At: 0, Peek: true, Remaining: 0, RetryAfter: 1500 * Millisecond, ResetAfter: 2500 * Millisecond},
			{At: 10 * Second, Cost: huge, Remaining: 0, RetryAfter: Hour + 100*Millisecond, ResetAfter: Hour + Second},
			{At: 10 * Second, Cost: huge, Remaining: 0, RetryAfter: Hour + 100*Millisecond, ResetAfter: Hour + Second},
			{At: 10*Second + Hour + 100*Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "charge: three a second, exact",
		Params: charged(tb, 3, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 5, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 1666667},
			{At: 0, Peek: true, Remaining: 0, RetryAfter: 666667, ResetAfter: 1666667},
			{At: 666667, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1 * Second, Cost: 1, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
}

var leakyBucketCharge = []Case{
	{
		Name:   "charge: into debt, checks denied until it is paid",
		Params: charged(lb, 10, Second, 0), // capacity 2, one per 100ms
		Steps: []Step{
			{At: 0, Cost: 1, Allowed: true, Remaining: 1, ResetAfter: 100 * Millisecond},
			{At: 0, Cost: 1, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 0, Cost: 3, Remaining: 0, RetryAfter: 400 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 0, Peek: true, Remaining: 0, RetryAfter: 300 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 300 * Millisecond, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 10 * Second, Cost: huge, Remaining: 0, RetryAfter: Hour + 100*Millisecond, ResetAfter: Hour + 200*Millisecond},
			{At: 10*Second + Hour + 100*Millisecond, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
		},
	},
}

var fixedWindowCharge = []Case{
	{
		// envoyproxy/ratelimit's token-quota scenario: a check of cost 0
		// before each call, its real cost after; 3 of 6 served.
		Name:   "charge: past the limit until the window ends",
		Params: charged(fw, 10, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 10, ResetAfter: 0},
			{At: 0, Cost: 4, Allowed: true, Remaining: 6, ResetAfter: 1 * Second},
			{At: 0, Peek: true, Allowed: true, Remaining: 6, ResetAfter: 1 * Second},
			{At: 0, Cost: 4, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 0, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 0, Cost: 4, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 1 * Second},
			{At: 500 * Millisecond, Peek: true, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 500 * Millisecond, Peek: true, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 1 * Second, Peek: true, Allowed: true, Remaining: 10, ResetAfter: 0},
			{At: 1 * Second, Cost: 25, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 1 * Second},
			{At: 1 * Second, Cost: huge, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 1 * Second},
			{At: 2 * Second, Cost: 10, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
}
