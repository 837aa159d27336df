package archiver

import "github.com/jobvault/jobvault/pkg/record"

// Why an archive is incomplete is the record's to say (pkg/record), shared by the reconcilers and
// the Sealer (pkg/audit); under short names within this package.
const neverStarted = record.NeverStarted

var incompleteReason = record.IncompleteReason
