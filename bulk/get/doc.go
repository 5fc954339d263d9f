// Package get is the bulk get: a BulkGetOperation created on
// bulk.k8s.io/v1alpha1 (REST), answered from the cache by a Getter with
// one list per operation, and written to the client from the cache's
// encoded objects.
//
//	REST.Create --in-flight slot (per caller)--> Getter.Answer
//	                                               |  bulk.Catalog: parse, authorize
//	                                               |  read every cached operation; list the
//	                                               |  uncached ones on kube-apiserver (8 at a time)
//	                                               v
//	                                             Answer: []list of references to encoded bytes
//	                                               |  size checked against Limits.MaxAnswerBytes
//	                                               v
//	streamedOperation.CacheEncode --head, results, tail--> the response
//
// Invariants:
//   - Nothing partial is ever returned (as package bulk says), and a
//     refusal names its operation (spec.operations[i]).
//   - An answer references the encoder's cached bytes, never a copy:
//     its cost beyond the cache is a reference per item, whatever the
//     items' size. Only an encoding the stream cannot produce (YAML,
//     indented JSON) builds the answer in memory.
//   - The answer's size is known, and checked against MaxAnswerBytes,
//     before anything of it is written: too large is 413, with nothing
//     written.
//   - A caller with MaxInFlightPerUser answers not yet written gets 429
//     with Retry-After, which client-go retries; its slot is freed when
//     the answer is written or the request ends, whichever comes first.
//   - A list's pages read one state: a continue token carries the
//     resourceVersion of the first page, and is kube-apiserver's own.
package get
