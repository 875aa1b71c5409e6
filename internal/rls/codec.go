package rls

import (
	"errors"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec wrapped here
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codec is the gRPC codec the server reads requests with: gRPC's proto
// codec, except that a RateLimitRequest is read without checking that its
// strings are UTF-8. Envoy copies header values into descriptor entries
// byte for byte, and protobuf-go refuses a proto3 string that is not
// UTF-8: with the plain codec such a request failed before sluice saw it
// (codes.Internal, which Envoy turns into "allow"). Answers never carry a
// caller's value, so they are written by the plain codec.
type codec struct{ base encoding.CodecV2 }

func newCodec() codec { return codec{base: encoding.GetCodecV2("proto")} }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return unmarshalRequest(data[0].ReadOnlyData(), req)
	}
	// Several buffers (a request of more than one frame): one copy, which
	// the request's strings are cut from (see unmarshalRequest).
	b := data.Materialize()
	return unmarshalOwned(b, req)
}

// Field numbers of the messages unmarshalRequest reads (rls.proto,
// ratelimit.proto).
const (
	fieldRequestDomain          = 1
	fieldRequestDescriptors     = 2
	fieldRequestHitsAddend      = 3
	fieldDescriptorEntries      = 1
	fieldDescriptorLimit        = 2
	fieldDescriptorHitsAddend   = 3
	fieldDescriptorNegativeHits = 4
	fieldEntryKey               = 1
	fieldEntryValue             = 2
)

var errWire = errors.New("rls: malformed RateLimitRequest")

// submessage reads the embedded messages that hold no string.
var submessage = proto.UnmarshalOptions{Merge: true, DiscardUnknown: true}

// unmarshalRequest reads b into m (reset first) as proto.Unmarshal with
// DiscardUnknown would, except that strings need not be UTF-8. b is copied
// once, into a string every string of m is a piece of; the entries of a
// descriptor are one allocation.
func unmarshalRequest(b []byte, m *rlsv3.RateLimitRequest) error {
	// The copy is read as bytes, never written: the strings cut from it
	// stay as they are.
	c := string(b)
	return unmarshalOwned(unsafe.Slice(unsafe.StringData(c), len(c)), m)
}

// unmarshalOwned is unmarshalRequest of b that nothing else holds or
// writes: the strings of m are cut from b itself.
func unmarshalOwned(b []byte, m *rlsv3.RateLimitRequest) error {
	m.Reset()
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == fieldRequestDomain && typ == protowire.BytesType:
			m.Domain = piece(v)
		case num == fieldRequestDescriptors && typ == protowire.BytesType:
			d := new(ratelimitv3.RateLimitDescriptor)
			if err := unmarshalDescriptor(v, d); err != nil {
				return err
			}
			m.Descriptors = append(m.Descriptors, d)
		case num == fieldRequestHitsAddend && typ == protowire.VarintType:
			m.HitsAddend = uint32(x)
		}
		return nil
	})
}

// piece returns v, a piece of the string unmarshalRequest copied the
// message into, as a string without copying it.
func piece(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	return unsafe.String(&v[0], len(v))
}

// unmarshalDescriptor reads b, a piece of unmarshalRequest's copy, into d.
func unmarshalDescriptor(b []byte, d *ratelimitv3.RateLimitDescriptor) error {
	n := 0 // the entries, counted first: they are allocated at once
	if err := eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) error {
		if num == fieldDescriptorEntries && typ == protowire.BytesType {
			n++
		}
		return nil
	}); err != nil {
		return err
	}
	var entries []ratelimitv3.RateLimitDescriptor_Entry
	if n > 0 {
		entries = make([]ratelimitv3.RateLimitDescriptor_Entry, n)
		d.Entries = make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, n)
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == fieldDescriptorEntries && typ == protowire.BytesType:
			e := &entries[len(d.Entries)]
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == fieldEntryKey && typ == protowire.BytesType:
					e.Key = piece(v)
				case num == fieldEntryValue && typ == protowire.BytesType:
					e.Value = piece(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.Entries = append(d.Entries, e)
		case num == fieldDescriptorLimit && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
			}
			return submessage.Unmarshal(v, d.Limit)
		case num == fieldDescriptorHitsAddend && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = new(wrapperspb.UInt64Value)
			}
			return submessage.Unmarshal(v, d.HitsAddend)
		case num == fieldDescriptorNegativeHits && typ == protowire.VarintType:
			d.IsNegativeHits = x != 0
		}
		return nil
	})
}

// eachField calls fn with each field of the message b: its number and wire
// type, and its bytes (length-delimited) or value (varint). Other wire
// types are skipped.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return errWire // protobuf-go refuses field numbers past 2^29-1 too
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := fn(num, typ, v, x); err != nil {
				return err
			}
		}
	}
	return nil
}
