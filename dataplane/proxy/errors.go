package proxy

import (
	"errors"
	"syscall"
)

// isResourceError reports an error of exhausted process or system
// resources: file descriptors, socket buffers, memory.
func isResourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
