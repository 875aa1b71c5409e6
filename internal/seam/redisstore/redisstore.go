// Package redisstore reads what sluice's tests and bench/redis need of a
// Redis store (store/redis) beyond its API: its connection, the key of a
// bucket, the command its scripts run as and its lease counters. Package
// store/redis sets the variables below in its init, so every program that
// holds a *redis.Store finds them set; each takes that *redis.Store.
package redisstore

import "github.com/redis/rueidis"

var (
	// Client returns the store's connection.
	Client func(store any) rueidis.Client

	// Key returns the Redis key of the bucket (client, rule):
	// <prefix>{client}:rule.
	Key func(store any, client, rule string) string

	// Command is the command that runs take.lua and reserve.lua: "FCALL"
	// (a function library, Redis 7 and later) or "EVALSHA".
	Command func(store any) string

	// Leases reports the store's lease counters; zero when leases are off.
	Leases func(store any) LeaseStats
)

// LeaseStats counts a store's leases since it started.
type LeaseStats struct {
	Calls    int64 // lease calls to Redis
	Granted  int64 // tokens leased
	Given    int64 // unused tokens given back
	Decided  int64 // decisions made from leases, without a round trip
	Buckets  int   // buckets leased now
	Stranded int64 // tokens in hand now (given back or, if this instance dies, stranded)
}
