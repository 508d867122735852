package train

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/train/internal/hook"
)

func TestRegister(t *testing.T) {
	fn := func(context.Context, *Context) error { return nil }
	if err := Register("", fn); err == nil {
		t.Error("empty name accepted")
	}
	if err := Register("t-nil", nil); err == nil {
		t.Error("nil function accepted")
	}
	if err := Register("t-once", fn); err != nil {
		t.Fatal(err)
	}
	if err := Register("t-once", fn); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := lookup("t-once"); err != nil {
		t.Error(err)
	}
	if _, err := lookup("t-missing"); !errors.Is(err, hook.ErrUnknownFunc) || !strings.Contains(err.Error(), "t-once") {
		t.Errorf("lookup(missing) = %v, want hook.ErrUnknownFunc listing what is registered", err)
	}
}

func TestNonRetryable(t *testing.T) {
	t.Parallel()
	base := errors.New("bad lr")
	err := NonRetryable(base)
	if !IsNonRetryable(err) || !errors.Is(err, base) || IsNonRetryable(base) || NonRetryable(nil) != nil {
		t.Error("NonRetryable wrapping is wrong")
	}
	tc := newContext(context.Background(), hook.Info{Config: json.RawMessage(`{"lr":"x"}`)}, nil, nil, nil)
	var cfg struct{ LR float64 }
	if err := tc.Config(&cfg); !IsNonRetryable(err) {
		t.Errorf("undecodable config: %v, want non-retryable", err)
	}
}
