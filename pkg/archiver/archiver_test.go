package archiver

import (
	"strings"
	"testing"
	"time"
)

func TestValidateRejectsNegativeRetention(t *testing.T) {
	o := DefaultOptions()
	o.Retention = -time.Second
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "retention must not be negative") {
		t.Errorf("Validate with retention -1s = %v, want an error naming the retention", err)
	}
}
