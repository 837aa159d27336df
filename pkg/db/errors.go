package db

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

var (
	// ErrNotFound: the row asked for, or a row the write refers to (the job of a transition, the
	// pod of a log object), does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the input breaks a rule of the schema (missing field, unknown enum value, bad
	// JSON, malformed sha256). Nothing was written.
	ErrInvalid = errors.New("invalid")
	// ErrConflict: a uniqueness rule was broken in a way an upsert does not absorb.
	ErrConflict = errors.New("conflict")
	// ErrSegmentConflict (an ErrConflict): PutSegment found another segment recorded under the same
	// (pod, container, run, seq). The recorded row is the durable one and was left as it is: the
	// caller's idea of the durable position is wrong (a flush whose commit succeeded but whose
	// reply was lost, then retried with more lines), so it must re-read the run's segments and
	// resume from them, writing that number's object again from the recorded position.
	ErrSegmentConflict = fmt.Errorf("%w: another segment is recorded under this number", ErrConflict)
	// ErrAppendOnly: the write would change or delete a row that never changes once written (a
	// job's phase transition, a stored log, a log gap). Only the retention pruner deletes them.
	ErrAppendOnly = errors.New("append-only")
	// ErrNotOwner: a node agent's write or completion for a run it does not own (any more): the
	// archiver took it over, or it was the API's from the start. Nothing was written; the agent
	// must drop the run.
	ErrNotOwner = errors.New("not the run's owner")
	// ErrFinalized: a capture's write (a segment, a gap, a log object) for a pod whose job is
	// finalized: its record is sealed, and nothing may be added to it. Nothing was written; the
	// capture must stop.
	ErrFinalized = errors.New("the job is finalized")
	// ErrDirty: a migration failed part-way and the schema version is marked dirty. Every migration
	// runs in one transaction, so the failed one left no changes; an operator must check and
	// force the version (golang-migrate's `force`) before migrations can run again.
	ErrDirty = errors.New("schema version is dirty")
)

// translate maps driver errors to this package's sentinels by SQLSTATE, keeping the original in the
// chain (errors.As(err, **pq.Error) still works). Errors without a meaningful mapping pass through.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	pqErr := pq.As(err)
	if pqErr == nil {
		return err
	}
	switch {
	case pqErr.Code == pqerror.ForeignKeyViolation:
		// Insert side: the referenced job or pod row is missing.
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case pqErr.Code == pqerror.UniqueViolation, pqErr.Code == pqerror.ExclusionViolation:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case pqErr.Code == pqerror.RestrictViolation:
		// Raised by the append-only triggers (migration 0005).
		return fmt.Errorf("%w: %w", ErrAppendOnly, err)
	case pqErr.Code == pqerror.CheckViolation, pqErr.Code == pqerror.NotNullViolation,
		pqErr.Code.Class() == "22": // data exception: bad JSON, out-of-range number, bad timestamp
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// invalid reports the problems found in an input, all at once.
// emptyFields names the empty ones of the required fields given as name, value pairs, in order:
// "NAME is empty" each, as invalid lists them.
func emptyFields(pairs ...string) []string {
	var problems []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			problems = append(problems, pairs[i]+" is empty")
		}
	}
	return problems
}

func invalid(what string, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w %s: %s", ErrInvalid, what, strings.Join(problems, "; "))
}
