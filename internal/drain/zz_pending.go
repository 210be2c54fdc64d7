package drain

// TEMPORARY stand-ins for the API being built on branch drain-hardening;
// deleted when it is merged.

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const FieldManager = "gnsh"

type Only func(*Ownership) bool

var Ours Only = func(*Ownership) bool { return true }

func IsAPIFailure(err error) bool {
	if IsUnreachable(err) {
		return true
	}
	var se apierrors.APIStatus
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	if errors.As(err, &se) && se.Status().Code >= 500 {
		return true
	}
	return false
}

type NodeNotReadyError struct {
	Node, Reason string
	Waiting      []string
}

func (e *NodeNotReadyError) Error() string {
	return fmt.Sprintf("the kubelet on %s is not running (%s): not waiting for %d terminating pods", e.Node, e.Reason, len(e.Waiting))
}
