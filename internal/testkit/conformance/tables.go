package conformance

import "github.com/sluicehq/sluice/algorithm"

const (
	tb = algorithm.TokenBucket
	lb = algorithm.LeakyBucket
	fw = algorithm.FixedWindow
	sw = algorithm.SlidingWindow
	sl = algorithm.SlidingLog

	capacity = algorithm.ReasonCostExceedsCapacity
)

func steps(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var tokenBucket = []Case{
	{
		Name:   "cost 0 reads without taking",
		Params: params(tb, 10, Second, 10),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 10, ResetAfter: 0},
			{At: 0, Cost: 10, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 0, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 0, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 1 * Second},
			{At: 250 * Millisecond, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 750 * Millisecond},
			{At: 250 * Millisecond, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 950 * Millisecond},
		},
	},
	{
		// The seed scenario: 1/s with a burst of 10 lets 10 through at once,
		// denies the 11th for one second, then one more.
		Name:   "burst then refill",
		Params: params(tb, 1, Second, 10),
		Steps: steps(
			[]Step{{At: 0, Allowed: true, Remaining: 9, ResetAfter: 1 * Second}},
			[]Step{{At: 0, Allowed: true, Remaining: 8, ResetAfter: 2 * Second}},
			[]Step{
				{At: 0, Allowed: true, Remaining: 7, ResetAfter: 3 * Second},
				{At: 0, Allowed: true, Remaining: 6, ResetAfter: 4 * Second},
				{At: 0, Allowed: true, Remaining: 5, ResetAfter: 5 * Second},
				{At: 0, Allowed: true, Remaining: 4, ResetAfter: 6 * Second},
				{At: 0, Allowed: true, Remaining: 3, ResetAfter: 7 * Second},
				{At: 0, Allowed: true, Remaining: 2, ResetAfter: 8 * Second},
				{At: 0, Allowed: true, Remaining: 1, ResetAfter: 9 * Second},
				{At: 0, Allowed: true, Remaining: 0, ResetAfter: 10 * Second},
				{At: 0, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 10 * Second},
				{At: 500 * Millisecond, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 9500 * Millisecond},
				{At: 1 * Second, Allowed: true, Remaining: 0, ResetAfter: 10 * Second},
				{At: 1 * Second, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 10 * Second},
				{At: 1999999, Remaining: 0, RetryAfter: 1, ResetAfter: 9000001},
				{At: 2 * Second, Allowed: true, Remaining: 0, ResetAfter: 10 * Second},
				// A long quiet spell refills to the burst, no further.
				{At: 1 * Hour, Allowed: true, Remaining: 9, ResetAfter: 1 * Second},
			},
		),
	},
	{
		Name:   "cost above capacity is denied and consumes nothing",
		Params: params(tb, 10, Second, 5),
		Steps: []Step{
			{At: 0, Cost: 6, Reason: capacity, Remaining: 5, ResetAfter: 0},
			{At: 0, Cost: 5, Allowed: true, Remaining: 0, ResetAfter: 500 * Millisecond},
			{At: 0, Cost: 6, Reason: capacity, Remaining: 0, ResetAfter: 500 * Millisecond},
			{At: 100 * Millisecond, Cost: 1, Allowed: true, Remaining: 0, ResetAfter: 500 * Millisecond},
		},
	},
	{
		Name:   "cost takes all or nothing",
		Params: params(tb, 10, Second, 10),
		Steps: []Step{
			{At: 0, Cost: 7, Allowed: true, Remaining: 3, ResetAfter: 700 * Millisecond},
			{At: 0, Cost: 4, Remaining: 3, RetryAfter: 100 * Millisecond, ResetAfter: 700 * Millisecond},
			{At: 0, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "fractional refill rounds retry up",
		Params: params(tb, 3, Second, 3),
		Steps: []Step{
			{At: 0, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 0, Remaining: 0, RetryAfter: 333334, ResetAfter: 1 * Second},
			// full again at 1 s: 666,667,000 ns from now
			{At: 333333, Remaining: 0, RetryAfter: 1, ResetAfter: 666667},
			{At: 333334, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		// A token is 333,333,333.3 ns. Each allowed call's debt is rounded
		// down to a whole ns (0.3 ns in the caller's favour), so a full
		// bucket admits exactly 3 at once; then one every 333,333.3 µs, each
		// at the first whole µs: 333,334, 666,667, 1,000,000, 1,333,334.
		Name:   "three a second, one at a time",
		Params: params(tb, 3, Second, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 2, ResetAfter: 333334},     // F = 333,333,333 ns
			{At: 0, Allowed: true, Remaining: 1, ResetAfter: 666667},     // 666,666,666
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1 * Second}, // 999,999,999
			{At: 0, Remaining: 0, RetryAfter: 333334, ResetAfter: 1 * Second},
			{At: 333333, Remaining: 0, RetryAfter: 1, ResetAfter: 666667},
			{At: 333334, Allowed: true, Remaining: 0, ResetAfter: 1 * Second}, // 1,333,333,332
			{At: 333334, Remaining: 0, RetryAfter: 333333, ResetAfter: 1 * Second},
			{At: 666666, Remaining: 0, RetryAfter: 1, ResetAfter: 666668},
			{At: 666667, Allowed: true, Remaining: 0, ResetAfter: 1 * Second}, // 1,666,666,665
			{At: 999999, Remaining: 0, RetryAfter: 1, ResetAfter: 666668},
			{At: 1 * Second, Allowed: true, Remaining: 0, ResetAfter: 1 * Second}, // 1,999,999,998
			{At: 1 * Second, Remaining: 0, RetryAfter: 333334, ResetAfter: 1 * Second},
			{At: 1333334, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			// Idle for a second: full again, 3 at once.
			{At: 3 * Second, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		// Full again at 2 h 10 s, seen from 5 s: more than an hour
		// (algorithm.maxQueue) beyond an empty bucket (1 s), which no
		// reservation can be. The debt is clamped: the caller is not blocked
		// for the length of the skew.
		Name:   "clock jumps backwards",
		Params: params(tb, 10, Second, 10),
		Steps: []Step{
			{At: 2*Hour + 9*Second, Cost: 10, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 5 * Second, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 1 * Second},
			{At: 5*Second + 100*Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 6 * Second, Cost: 9, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "raised limit takes effect",
		Params: params(tb, 1, Minute, 1),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1 * Minute},
			{At: 1 * Second, Remaining: 0, RetryAfter: 59 * Second, ResetAfter: 59 * Second},
			{At: 1 * Second, Params: edit(tb, 60, Minute, 60), Allowed: true, Remaining: 0, ResetAfter: 1 * Minute},
			{At: 2 * Second, Allowed: true, Remaining: 0, ResetAfter: 1 * Minute},
		},
	},
	{
		// The state is the time until full; an edited rule reads it at its
		// own rate. 5 s short of full at 10 a minute is 5/6 of a token
		// taken: 9.17 left, 8.17 after this call, full again 11 s later.
		Name:   "lowered limit clamps",
		Params: params(tb, 100, Minute, 0),
		Steps: []Step{
			{At: 0, Cost: 10, Allowed: true, Remaining: 90, ResetAfter: 6 * Second},
			{At: 1 * Second, Params: edit(tb, 10, Minute, 0), Allowed: true, Remaining: 8, ResetAfter: 11 * Second},
			{At: 1 * Second, Cost: 10, Remaining: 8, RetryAfter: 11 * Second, ResetAfter: 11 * Second},
		},
	},
	{
		// 59 s short of full is more than a bucket of 10 at 100 a minute can
		// be (6 s): the debt is owed as it is (it could be reservations
		// handed out), and the new rule admits a call once it is paid off.
		Name:   "lowered burst: the debt is paid off",
		Params: params(tb, 100, Minute, 100),
		Steps: []Step{
			{At: 0, Cost: 100, Allowed: true, Remaining: 0, ResetAfter: 1 * Minute},
			{At: 1 * Second, Params: edit(tb, 100, Minute, 10), Remaining: 0, RetryAfter: 53600 * Millisecond, ResetAfter: 59 * Second},
			{At: 54600 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 6 * Second},
			{At: 60600 * Millisecond, Cost: 10, Allowed: true, Remaining: 0, ResetAfter: 6 * Second},
		},
	},
	{
		Name:   "tiny window",
		Params: params(tb, 1, Millisecond, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
			{At: 500, Remaining: 0, RetryAfter: 500, ResetAfter: 500},
			{At: 1 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
			{At: 1 * Second, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
		},
	},
	{
		Name:   "huge window",
		Params: params(tb, 1, 366*Day, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 366 * Day},
			{At: 1 * Second, Remaining: 0, RetryAfter: 366*Day - Second, ResetAfter: 366*Day - Second},
			{At: 366 * Day, Allowed: true, Remaining: 0, ResetAfter: 366 * Day},
		},
	},
	{
		Name:   "large limit, one day",
		Params: params(tb, 1_000_000_000, Day, 0),
		Steps: []Step{
			// one token every 86.4µs
			{At: 0, Cost: 999_999_999, Allowed: true, Remaining: 1, ResetAfter: 86_399_999_914},
			{At: 0, Cost: 2, Remaining: 1, RetryAfter: 87, ResetAfter: 86_399_999_914},
			{At: 87, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Day},
		},
	},
	{
		// One token a ns: a cost of 1500 is 1.5 µs of refill.
		Name:   "cost at a billion a second",
		Params: params(tb, 1_000_000_000, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 1500, Allowed: true, Remaining: 999_998_500, ResetAfter: 2},
			{At: 0, Cost: 999_997_500, Allowed: true, Remaining: 1000, ResetAfter: 999_999},
			{At: 0, Cost: 1500, Remaining: 1000, RetryAfter: 1, ResetAfter: 999_999},
			{At: 1, Cost: 1500, Allowed: true, Remaining: 500, ResetAfter: 1 * Second},
			{At: 1, Cost: 1500, Remaining: 500, RetryAfter: 1, ResetAfter: 1 * Second},
			{At: 2, Cost: 1500, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 2, Cost: 1500, Remaining: 0, RetryAfter: 2, ResetAfter: 1 * Second},
			{At: 3, Cost: 1500, Remaining: 1000, RetryAfter: 1, ResetAfter: 999_999},
			{At: 4, Cost: 1500, Allowed: true, Remaining: 500, ResetAfter: 1 * Second},
		},
	},
}

var tokenBucketExact = []Case{
	{
		// A token is 2,333⅓ µs. A full bucket admits its capacity in any
		// split: 3 then 2 at one instant (a float debt refused the 2 by
		// a rounding of 1 µs).
		Name:   "a full bucket admits its capacity in any split",
		Params: params(tb, 3, 7*Millisecond, 5),
		Steps: []Step{
			{At: 0, Cost: 3, Allowed: true, Remaining: 2, ResetAfter: 7000},
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 11667},
			// full again at 11,666⅔ µs; a token back at 2,333⅓: the first
			// whole µs is 2,334
			{At: 0, Remaining: 0, RetryAfter: 2334, ResetAfter: 11667},
			{At: 2333, Remaining: 0, RetryAfter: 1, ResetAfter: 9334},
			{At: 2334, Allowed: true, Remaining: 0, ResetAfter: 11666},
		},
	},
	{
		// A token is 423,333⅓ µs; 12 taken leave exactly 7, and 7 unit
		// calls pass (Remaining said 6 with a float debt).
		Name:   "remaining is exact",
		Params: params(tb, 9, 3810*Millisecond, 19),
		Steps: []Step{
			{At: 0, Cost: 12, Allowed: true, Remaining: 7, ResetAfter: 5_080_000},
			{At: 0, Allowed: true, Remaining: 6, ResetAfter: 5_503_334},
			{At: 0, Allowed: true, Remaining: 5, ResetAfter: 5_926_667},
			{At: 0, Allowed: true, Remaining: 4, ResetAfter: 6_350_000},
			{At: 0, Allowed: true, Remaining: 3, ResetAfter: 6_773_334},
			{At: 0, Allowed: true, Remaining: 2, ResetAfter: 7_196_667},
			{At: 0, Allowed: true, Remaining: 1, ResetAfter: 7_620_000},
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 8_043_334},
			{At: 0, Remaining: 0, RetryAfter: 423_334, ResetAfter: 8_043_334},
		},
	},
	{
		// 10^9 a millisecond: a token is 10^-6 µs, and a unit call is not
		// free (a debt in whole ns made calls under 1 ns cost nothing).
		Name:   "a billion a millisecond",
		Params: params(tb, 1_000_000_000, Millisecond, 0),
		Steps: []Step{
			{At: 0, Cost: 999_999_999, Allowed: true, Remaining: 1, ResetAfter: 1000},
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1000},
			{At: 0, Remaining: 0, RetryAfter: 1, ResetAfter: 1000},
			{At: 1, Cost: 1_000_001, Remaining: 1_000_000, RetryAfter: 1, ResetAfter: 999},
			{At: 1, Cost: 1_000_000, Allowed: true, Remaining: 0, ResetAfter: 1000},
		},
	},
	{
		// The longest refill a rule may have (MaxRefill, 40 × 366 days),
		// emptied at an instant near the end of int64 ns (2262): exact.
		Name:   "longest refill near 2262",
		Params: params(tb, 1, 366*Day, 40),
		Steps: []Step{
			{At: 9_223_372_036_854_775 - Base - 41*366*Day, Cost: 40, Allowed: true, Remaining: 0, ResetAfter: 40 * 366 * Day},
			{At: 9_223_372_036_854_775 - Base - 41*366*Day, Remaining: 0, RetryAfter: 366 * Day, ResetAfter: 40 * 366 * Day},
			{At: 9_223_372_036_854_775 - Base - 40*366*Day, Allowed: true, Remaining: 0, ResetAfter: 40 * 366 * Day},
		},
	},
}

var leakyBucket = []Case{
	{
		Name:   "cost 0 reads without taking",
		Params: params(lb, 10, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 0},
			{At: 0, Allowed: true, Remaining: 1, ResetAfter: 100 * Millisecond},
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 0, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 0, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 200 * Millisecond},
		},
	},
	{
		// 1/s with the default burst of 1: two at once, then one a second.
		Name:   "meter",
		Params: params(lb, 1, Second, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 1, ResetAfter: 1 * Second},
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 0, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 2 * Second},
			{At: 999999, Remaining: 0, RetryAfter: 1, ResetAfter: 1000001},
			{At: 1 * Second, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 2500 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1500 * Millisecond},
			{At: 10 * Second, Allowed: true, Remaining: 1, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "burst",
		Params: params(lb, 10, Second, 3),
		Steps: []Step{
			{At: 0, Cost: 4, Allowed: true, Remaining: 0, ResetAfter: 400 * Millisecond},
			{At: 0, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 400 * Millisecond},
			{At: 250 * Millisecond, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 350 * Millisecond},
		},
	},
	{
		Name:   "cost above capacity is denied and consumes nothing",
		Params: params(lb, 1, Second, 1),
		Steps: []Step{
			{At: 0, Cost: 3, Reason: capacity, Remaining: 2, ResetAfter: 0},
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
		},
	},
	{
		// The interval rounds up to a whole µs: 333334.
		Name:   "fractional interval",
		Params: params(lb, 3, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 666668},
			{At: 0, Remaining: 0, RetryAfter: 333334, ResetAfter: 666668},
			{At: 333333, Remaining: 0, RetryAfter: 1, ResetAfter: 333335},
			{At: 333334, Allowed: true, Remaining: 0, ResetAfter: 666668},
		},
	},
	{
		// More than an hour (algorithm.maxQueue) of debt beyond an empty
		// meter, which no reservation can be: clamped.
		Name:   "clock jumps backwards",
		Params: params(lb, 1, Second, 1),
		Steps: []Step{
			{At: 2 * Hour, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 5 * Second, Remaining: 0, RetryAfter: 1 * Second, ResetAfter: 2 * Second},
			{At: 6 * Second, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
		},
	},
	{
		// The debt built at the old rate (1.9 s) is more than the new meter
		// holds (200 ms): owed as it is (it could be reservations handed
		// out), the new rate admits a call once it is paid off.
		Name:   "raised limit takes effect once the debt is paid",
		Params: params(lb, 1, Second, 1),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 100 * Millisecond, Params: edit(lb, 10, Second, 1), Remaining: 0, RetryAfter: 1800 * Millisecond, ResetAfter: 1900 * Millisecond},
			{At: 1900 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 2 * Second, Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
		},
	},
	{
		Name:   "lowered limit clamps",
		Params: params(lb, 10, Second, 5),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 5, ResetAfter: 100 * Millisecond},
			{At: 0, Params: edit(lb, 10, Second, 1), Allowed: true, Remaining: 0, ResetAfter: 200 * Millisecond},
			{At: 0, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 200 * Millisecond},
		},
	},
	{
		Name:   "tiny window",
		Params: params(lb, 1, Millisecond, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Millisecond},
			{At: 1, Remaining: 0, RetryAfter: 999, ResetAfter: 1999},
			{At: 1 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 2 * Millisecond},
		},
	},
	{
		Name:   "huge window",
		Params: params(lb, 1, 366*Day, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * 366 * Day},
			{At: 1 * Second, Remaining: 0, RetryAfter: 366*Day - Second, ResetAfter: 2*366*Day - Second},
		},
	},
}

var fixedWindow = []Case{
	{
		// A call of cost 0 (Envoy's hits_addend 0) reads the bucket: it
		// passes with what remains — also when nothing does — and takes
		// nothing. Only a bucket holding more than its limit (the limit
		// was lowered) denies it.
		Name:   "cost 0 reads without taking",
		Params: params(fw, 3, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 3, ResetAfter: 0},
			{At: 0, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 100 * Millisecond, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 900 * Millisecond},
			{At: 100 * Millisecond, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 900 * Millisecond},
			{At: 200 * Millisecond, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 800 * Millisecond},
			{At: 200 * Millisecond, Remaining: 0, RetryAfter: 800 * Millisecond, ResetAfter: 800 * Millisecond},
			{At: 300 * Millisecond, Peek: true, Params: ptr(params(fw, 2, Second, 0)), Remaining: 0, RetryAfter: 700 * Millisecond, ResetAfter: 700 * Millisecond},
			{At: 1 * Second, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 0},
			{At: 1 * Second, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "counts per aligned window",
		Params: params(fw, 3, Second, 0),
		Steps: steps(
			[]Step{
				{At: 0, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
				{At: 100 * Millisecond, Allowed: true, Remaining: 1, ResetAfter: 900 * Millisecond},
				{At: 200 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 800 * Millisecond},
				{At: 500 * Millisecond, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 500 * Millisecond},
				{At: 999999, Remaining: 0, RetryAfter: 1, ResetAfter: 1},
				{At: 1 * Second, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			},
		),
	},
	{
		// The boundary flaw: 2×limit within two microseconds.
		Name:   "boundary burst",
		Params: params(fw, 3, Minute, 0),
		Steps: []Step{
			{At: Minute - 1, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1},
			{At: Minute, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Minute},
			{At: Minute + 1, Remaining: 0, RetryAfter: Minute - 1, ResetAfter: Minute - 1},
		},
	},
	{
		Name:   "cost above capacity is denied and consumes nothing",
		Params: params(fw, 5, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 6, Reason: capacity, Remaining: 5, ResetAfter: 0},
			{At: 0, Cost: 5, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1 * Millisecond, Cost: 1, Remaining: 0, RetryAfter: 999 * Millisecond, ResetAfter: 999 * Millisecond},
		},
	},
	{
		// The count carries over into the earlier window; it neither frees
		// capacity nor blocks past that window's end.
		Name:   "clock jumps backwards",
		Params: params(fw, 3, Second, 0),
		Steps: []Step{
			{At: 2500 * Millisecond, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 500 * Millisecond},
			{At: 1500 * Millisecond, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 2 * Second, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "raised limit takes effect, lowered clamps",
		Params: params(fw, 3, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1, Params: edit(fw, 5, Second, 0), Cost: 2, Allowed: true, Remaining: 0, ResetAfter: Second - 1},
			{At: 2, Params: edit(fw, 2, Second, 0), Remaining: 0, RetryAfter: Second - 2, ResetAfter: Second - 2},
		},
	},
	{
		Name:   "tiny window",
		Params: params(fw, 1, Millisecond, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
			{At: 999, Remaining: 0, RetryAfter: 1, ResetAfter: 1},
			{At: 1000, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
		},
	},
	{
		// 366 days does not divide Base: the window started before it.
		Name:   "huge window",
		Params: params(fw, 1, 366*Day, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 366*Day - Base%(366*Day)},
			{At: 1, Remaining: 0, RetryAfter: 366*Day - Base%(366*Day) - 1, ResetAfter: 366*Day - Base%(366*Day) - 1},
		},
	},
}

var slidingWindow = []Case{
	{
		Name:   "cost 0 reads without taking",
		Params: params(sw, 4, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 4, ResetAfter: 0},
			{At: 0, Cost: 4, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 500 * Millisecond, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 1500 * Millisecond},
			{At: 500 * Millisecond, Remaining: 0, RetryAfter: 750 * Millisecond, ResetAfter: 1500 * Millisecond},
		},
	},
	{
		Name:   "weighted estimate",
		Params: params(sw, 10, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 10, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 500 * Millisecond, Remaining: 0, RetryAfter: 600 * Millisecond, ResetAfter: 1500 * Millisecond},
			// previous 10 weighs 0.9 at 1.1s: estimate 9, one more fits.
			{At: 1100 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1900 * Millisecond},
			{At: 1100 * Millisecond, Remaining: 0, RetryAfter: 100 * Millisecond, ResetAfter: 1900 * Millisecond},
			// 1.5s: 10×0.5 + 1 = 6 → room for 4.
			{At: 1500 * Millisecond, Cost: 4, Allowed: true, Remaining: 0, ResetAfter: 1500 * Millisecond},
			// 2.5s: 5×0.5 = 2.5 → 7 remain.
			{At: 2500 * Millisecond, Allowed: true, Remaining: 6, ResetAfter: 1500 * Millisecond},
		},
	},
	{
		Name:   "cost above capacity is denied and consumes nothing",
		Params: params(sw, 5, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 6, Reason: capacity, Remaining: 5, ResetAfter: 0},
			{At: 0, Cost: 5, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
		},
	},
	{
		Name:   "no boundary burst",
		Params: params(sw, 4, Minute, 0),
		Steps: []Step{
			{At: Minute - 1, Cost: 4, Allowed: true, Remaining: 0, ResetAfter: Minute + 1},
			// previous 4 weighs ~1 just after the boundary.
			{At: Minute, Remaining: 0, RetryAfter: 15 * Second, ResetAfter: Minute},
			{At: Minute + 15*Second, Allowed: true, Remaining: 0, ResetAfter: 105 * Second},
		},
	},
	{
		Name:   "clock jumps backwards",
		Params: params(sw, 2, Second, 0),
		Steps: []Step{
			{At: 5 * Second, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 3 * Second, Remaining: 0, RetryAfter: 1500 * Millisecond, ResetAfter: 2 * Second},
			{At: 4500 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1500 * Millisecond},
		},
	},
	{
		Name:   "raised limit takes effect, lowered clamps",
		Params: params(sw, 2, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			{At: 0, Params: edit(sw, 4, Second, 0), Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 2 * Second},
			// 4 counted: the estimate stays ≥ 1 until the previous window's 4
			// weigh nothing, two windows on.
			{At: 0, Params: edit(sw, 1, Second, 0), Remaining: 0, RetryAfter: 2 * Second, ResetAfter: 2 * Second},
		},
	},
	{
		Name:   "tiny window",
		Params: params(sw, 1, Millisecond, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 2 * Millisecond},
			{At: 1, Remaining: 0, RetryAfter: 1999, ResetAfter: 1999},
			{At: 1000, Remaining: 0, RetryAfter: 1000, ResetAfter: 1000},
			{At: 2000, Allowed: true, Remaining: 0, ResetAfter: 2 * Millisecond},
		},
	},
	{
		Name:   "huge window",
		Params: params(sw, 2, 366*Day, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, NoReset: true},
			{At: 1, Remaining: 0, RetryAfter: 366*Day - Base%(366*Day) - 1 + 183*Day, NoReset: true},
		},
	},
}

var slidingLog = []Case{
	{
		Name:   "cost 0 reads without taking",
		Params: params(sl, 3, Second, 0),
		Steps: []Step{
			{At: 0, Peek: true, Allowed: true, Remaining: 3, ResetAfter: 0},
			{At: 0, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 100 * Millisecond, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 900 * Millisecond},
			{At: 100 * Millisecond, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 200 * Millisecond, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 900 * Millisecond},
			{At: 200 * Millisecond, Remaining: 0, RetryAfter: 800 * Millisecond, ResetAfter: 900 * Millisecond},
			{At: 300 * Millisecond, Peek: true, Params: ptr(params(sl, 2, Second, 0)), Remaining: 0, RetryAfter: 700 * Millisecond, ResetAfter: 800 * Millisecond},
			{At: 1 * Second, Peek: true, Allowed: true, Remaining: 0, ResetAfter: 100 * Millisecond},
			{At: 1100 * Millisecond, Peek: true, Allowed: true, Remaining: 2, ResetAfter: 0},
		},
	},
	{
		Name:   "exact window",
		Params: params(sl, 3, Second, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 200 * Millisecond, Allowed: true, Remaining: 1, ResetAfter: 1 * Second},
			{At: 400 * Millisecond, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 500 * Millisecond, Remaining: 0, RetryAfter: 500 * Millisecond, ResetAfter: 900 * Millisecond},
			{At: 999999, Remaining: 0, RetryAfter: 1, ResetAfter: 400001},
			{At: 1 * Second, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1100 * Millisecond, Cost: 2, Remaining: 0, RetryAfter: 300 * Millisecond, ResetAfter: 900 * Millisecond},
			{At: 1400 * Millisecond, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		// Never more than limit in any window, even across a boundary.
		Name:   "no boundary burst",
		Params: params(sl, 3, Minute, 0),
		Steps: []Step{
			{At: Minute - 1, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: Minute},
			{At: Minute, Remaining: 0, RetryAfter: Minute - 1, ResetAfter: Minute - 1},
			{At: 2*Minute - 1, Allowed: true, Remaining: 2, ResetAfter: Minute},
		},
	},
	{
		Name:   "cost above capacity is denied and consumes nothing",
		Params: params(sl, 3, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 4, Reason: capacity, Remaining: 3, ResetAfter: 0},
			{At: 0, Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		// Calls logged at 5 s count until 6 s, whatever the clock says
		// meanwhile: a skewed clock blocks for the skew, never admits more.
		Name:   "clock jumps backwards",
		Params: params(sl, 2, Second, 0),
		Steps: []Step{
			{At: 5 * Second, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 3 * Second, Remaining: 0, RetryAfter: 3 * Second, ResetAfter: 3 * Second},
			{At: 4 * Second, Remaining: 0, RetryAfter: 2 * Second, ResetAfter: 2 * Second},
			{At: 6 * Second, Allowed: true, Remaining: 1, ResetAfter: 1 * Second},
		},
	},
	{
		// A call admitted while the clock reads earlier than the newest
		// entry is logged at that entry's time, so the log stays in order.
		Name:   "call during a backwards jump is logged at the newest time",
		Params: params(sl, 3, Second, 0),
		Steps: []Step{
			{At: 5 * Second, Allowed: true, Remaining: 2, ResetAfter: 1 * Second},
			{At: 3 * Second, Allowed: true, Remaining: 1, ResetAfter: 3 * Second},
			{At: 5*Second + 999999, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 5*Second + 999999, Remaining: 0, RetryAfter: 1, ResetAfter: 1 * Second},
			{At: 6 * Second, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		// One call of cost 10,000 is one entry of the Redis log, not 10,000.
		Name:   "cost at the largest limit",
		Params: params(sl, algorithm.MaxLogLimit, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 6000, Allowed: true, Remaining: 4000, ResetAfter: 1 * Second},
			{At: 500 * Millisecond, Cost: 4000, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 600 * Millisecond, Cost: 10000, Remaining: 0, RetryAfter: 900 * Millisecond, ResetAfter: 900 * Millisecond},
			{At: 1 * Second, Cost: 6001, Remaining: 6000, RetryAfter: 500 * Millisecond, ResetAfter: 500 * Millisecond},
			{At: 1 * Second, Cost: 6000, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1 * Second, Cost: 10001, Reason: capacity, Remaining: 0, ResetAfter: 1 * Second},
		},
	},
	{
		Name:   "raised limit takes effect, lowered clamps",
		Params: params(sl, 2, Second, 0),
		Steps: []Step{
			{At: 0, Cost: 2, Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 1, Params: edit(sl, 3, Second, 0), Allowed: true, Remaining: 0, ResetAfter: 1 * Second},
			{At: 2, Params: edit(sl, 1, Second, 0), Remaining: 0, RetryAfter: Second - 1, ResetAfter: Second - 1},
		},
	},
	{
		Name:   "tiny window",
		Params: params(sl, 1, Millisecond, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
			{At: 999, Remaining: 0, RetryAfter: 1, ResetAfter: 1},
			{At: 1000, Allowed: true, Remaining: 0, ResetAfter: 1 * Millisecond},
		},
	},
	{
		Name:   "huge window",
		Params: params(sl, 1, 366*Day, 0),
		Steps: []Step{
			{At: 0, Allowed: true, Remaining: 0, ResetAfter: 366 * Day},
			{At: 1 * Hour, Remaining: 0, RetryAfter: 366*Day - Hour, ResetAfter: 366*Day - Hour},
		},
	},
}

func ptr(p algorithm.Params) *algorithm.Params { return &p }
