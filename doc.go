// Package parley holds the domain of the Parley conversation server: sessions, messages in OpenAI
// chat format, run events, and the small contracts (Store, Provider, Tool) that the adapters in the
// sub-packages implement. It depends on nothing in this module.
package parley
