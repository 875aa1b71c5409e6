package redis

import (
	"context"
	"net"
	"strconv"
	"time"
)

// The failover layer keeps one breaker per shard (see Shard): a master
// that dies sends only its own slots' callers to the local fallback. The
// store knows which master serves which slot from CLUSTER SLOTS, read at
// start and again when a second has passed since the last reading and a
// call asks, as the client rescans its own topology every second.

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// slotMap is one reading of CLUSTER SLOTS: the master serving each slot,
// as an index into names (0: none known).
type slotMap struct {
	owner [slotCount]uint16
	names []string // names[0] is ""
}

// slotRefresh is how old a reading of the slots may be before a call that
// asks for a shard reads them again (in the background).
const slotRefresh = time.Second

// Shard names the shard that serves client's buckets: on a cluster, the
// address of the master serving their slot by the last reading of CLUSTER
// SLOTS ("" until one is known); on a standalone server, "". The names are
// the cluster's masters' addresses: as many as it has nodes.
func (s *Store) Shard(client string) string {
	if !s.cluster {
		return ""
	}
	now := time.Now().UnixNano()
	if at := s.slotsAt.Load(); now-at > int64(slotRefresh) && s.slotsAt.CompareAndSwap(at, now) {
		go s.readSlots()
	}
	m := s.slots.Load()
	if m == nil {
		return ""
	}
	return m.names[m.owner[hashSlot(s.key(client, ""))]]
}

// readSlots reads CLUSTER SLOTS and keeps the reading; an error keeps the
// last one.
func (s *Store) readSlots() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	defer cancel()
	entries, err := s.client.Do(ctx, s.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return
	}
	m := &slotMap{names: []string{""}}
	index := map[string]uint16{}
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || lo < 0 || hi >= slotCount || lo > hi {
			continue
		}
		host, _ := node[0].ToString()
		port, err := node[1].AsInt64()
		if err != nil {
			continue
		}
		name := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		i, ok := index[name]
		if !ok {
			i = uint16(len(m.names))
			index[name] = i
			m.names = append(m.names, name)
		}
		for slot := lo; slot <= hi; slot++ {
			m.owner[slot] = i
		}
	}
	s.slots.Store(m)
}

// hashSlot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag
// (what is between the first '{' and the next '}', when not empty) or of
// the whole key, modulo 16384.
func hashSlot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					break
				}
			}
			break
		}
	}
	return crc16(key) % slotCount
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster
// computes it.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
