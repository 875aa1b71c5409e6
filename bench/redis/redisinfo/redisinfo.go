// Package redisinfo reads what the Redis benchmarks measure from a
// server's INFO: its CPU time, its socket reads and writes, and the time
// it spent in each command. Shared by bench/redis and bench/redis/scriptcost.
package redisinfo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Section returns the fields of one INFO section.
func Section(ctx context.Context, c rueidis.Client, section string) (map[string]string, error) {
	s, err := c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// CPU returns the server's used_cpu_user + used_cpu_sys, in seconds.
func CPU(ctx context.Context, c rueidis.Client) (float64, error) {
	m, err := Section(ctx, c, "cpu")
	if err != nil {
		return 0, err
	}
	u, err1 := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, err2 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("INFO cpu: unreadable used_cpu_user %q / used_cpu_sys %q", m["used_cpu_user"], m["used_cpu_sys"])
	}
	return u + s, nil
}

// IO returns the server's total_reads_processed and
// total_writes_processed (INFO stats): socket reads and writes.
func IO(ctx context.Context, c rueidis.Client) (reads, writes int64, err error) {
	m, err := Section(ctx, c, "stats")
	if err != nil {
		return 0, 0, err
	}
	r, err1 := strconv.ParseInt(m["total_reads_processed"], 10, 64)
	w, err2 := strconv.ParseInt(m["total_writes_processed"], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("INFO stats: unreadable total_reads_processed %q / total_writes_processed %q", m["total_reads_processed"], m["total_writes_processed"])
	}
	return r, w, nil
}

// Command is one command's line of INFO commandstats.
type Command struct {
	Calls int64   // calls
	Usec  float64 // total µs spent in it
}

// Commands returns the commandstats of each of commands (a command
// nobody called is all zero). A script's calls are counted as its own
// command only: the commands it makes inside are not.
func Commands(ctx context.Context, c rueidis.Client, commands ...string) ([]Command, error) {
	m, err := Section(ctx, c, "commandstats")
	if err != nil {
		return nil, err
	}
	out := make([]Command, len(commands))
	for i, cmd := range commands {
		for _, f := range strings.Split(m["cmdstat_"+strings.ToLower(cmd)], ",") {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			var err error
			switch k {
			case "calls":
				out[i].Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				out[i].Usec, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats %s: unreadable %s %q", cmd, k, v)
			}
		}
	}
	return out, nil
}
