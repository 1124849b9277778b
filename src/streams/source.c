/*
 * source.c: sources other than a stream's own items.
 *
 * A document's `{doc}/_DocumentPart/{index:D6}` children are already the
 * document's log, one node per part.  durable_source_document_parts() lets a
 * consumer or a reader take them as a stream without a second copy: part
 * 000000 is sequence 1, 000001 sequence 2, and so on.  Only ids of exactly
 * six ASCII digits are parts ("42" is not, "000042" is), so that a part's
 * id and its sequence map one to one; anything else under the namespace is
 * skipped.
 * The payload is the part node's content, kept as stored.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PART_SEGMENT "_DocumentPart"
#define PART_DIGITS 6

static int64_t part_sequence(const durable_node_t *node, void *data) {
  (void)data;
  const char *id = node->id;
  if (id == NULL || strlen(id) != PART_DIGITS ||
      strspn(id, "0123456789") != PART_DIGITS)
    return 0;
  return strtoll(id, NULL, 10) + 1;
}

static int part_payload(const durable_node_t *node, char **payload,
                        durable_error_t *err, void *data) {
  (void)data;
  *payload = NULL;
  if (node->content == NULL)
    return durable__error(err, DURABLE_EINVAL, "%s carries no content",
                          node->path);
  *payload = strdup(node->content);
  return *payload ? 0 : durable__error(err, DURABLE_ENOMEM, "out of memory");
}

int durable_source_document_parts(const char *doc_path, char *items_ns,
                                  size_t size, durable_source_t *out) {
  if (doc_path == NULL || items_ns == NULL || out == NULL)
    return DURABLE_EINVAL;
  size_t len = strlen(doc_path);
  while (len > 0 && doc_path[len - 1] == '/')
    len--;
  int n = snprintf(items_ns, size, "%.*s/" PART_SEGMENT, (int)len, doc_path);
  if (n < 0 || (size_t)n >= size || durable_path_check(items_ns, NULL) < 0)
    return DURABLE_EINVAL;
  *out = (durable_source_t){.items_ns = items_ns,
                            .sequence_of = part_sequence,
                            .payload_of = part_payload,
                            .data = NULL};
  return 0;
}
