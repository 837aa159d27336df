package db

import (
	"encoding/json"
	"fmt"
	"time"
)

// NotifyChannel is the Postgres channel on which every newly recorded job transition is announced,
// once, when its write commits. Listen with lib/pq's pq.NewListener(dsn, …).Listen(NotifyChannel)
// and decode each payload with ParseNotification. Notifications are best-effort (a listener that
// is disconnected misses them): resynchronise from Transitions after a reconnect.
const NotifyChannel = "jobvault_transitions"

// Notification is the payload sent on NotifyChannel.
type Notification struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	// Time is the transition time (UTC, microsecond precision).
	Time time.Time `json:"time"`
}

// ParseNotification decodes a payload sent on NotifyChannel.
func ParseNotification(payload string) (Notification, error) {
	var n Notification
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return Notification{}, fmt.Errorf("%w transition notification: %w", ErrInvalid, err)
	}
	return n, nil
}
