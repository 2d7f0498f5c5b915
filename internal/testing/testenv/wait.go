package testenv

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// waitFor polls cond until it returns nil or 30s pass.
func waitFor(ctx context.Context, cond func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}
