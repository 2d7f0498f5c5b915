//go:build !linux

package proxy

func (l *loop) switchMasterAsync() {}
