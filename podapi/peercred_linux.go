package podapi

import "syscall"

type ucred = syscall.Ucred

func getPeerCred(fd int) (*ucred, error) {
	return syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
}
