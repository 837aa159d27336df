// Package stack runs jobvault's own programs on the testbed, wired as in a cluster, and holds what
// the end-to-end suites under test/e2e share; the demo uses it too.
//
//   - The webhook: the binary serving TLS, registered cluster-wide by config/webhook's
//     MutatingWebhookConfiguration (Webhook), or a server in the test process registered for one
//     test's namespaces (ServeWebhook); both from the same configuration (WebhookConfiguration).
//   - The archiver binary with its own database and object store (NewArchiver), and the Rig: one
//     archiver with a namespace behind the webhook, and the assertions on what it archived
//     (CheckJobArchive, CheckSources, CheckCapturedBy: which capture stored what).
//   - A node agent for a rig's database and store (StartAgent: `archiver agent`).
//   - Helpers on the cluster (CreateAs, WaitPhase, PodLogs, ReleaseNamespace, ...) and the database
//     (OpenRecords).
//
// Names: the object store is a store (objstore.Store), the database holds records (*db.DB).
package stack
