//go:build !unix

package rawio

import "errors"

const rawCalls = false

func sysRead(uintptr, []byte) (int, error)  { return 0, errors.ErrUnsupported }
func sysWrite(uintptr, []byte) (int, error) { return 0, errors.ErrUnsupported }
