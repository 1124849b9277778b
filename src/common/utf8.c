/*
 * utf8.c: one UTF-8 character, and where a text may be cut
 * (durable_text.h).
 *
 * The validity rule is the Unicode standard's table of well-formed byte
 * sequences, written out by lead byte: after 0xE0 the second byte is at
 * least 0xA0 (else an overlong form), after 0xED at most 0x9F (else a
 * surrogate), after 0xF0 at least 0x90 (overlong), after 0xF4 at most 0x8F
 * (above U+10FFFF); 0xC0, 0xC1 and 0xF5..0xFF never start a character.  It
 * is the one rule for paths, node types, principals and JSON strings, so a
 * text one of them accepts the others accept too.
 *
 * A cut looks back from the cut point only, so that it serves a buffer being
 * filled (whose next byte is not there yet) as well as a string.
 */
#include "durable_text.h"

static int continues(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

size_t durable__utf8_len(const char *text) {
  const unsigned char *s = (const unsigned char *)text;
  unsigned char c = s[0];
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return continues(s[1]) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!continues(s[1]) || !continues(s[2]))
      return 0;
    if (c == 0xE0 && s[1] < 0xA0)
      return 0; /* overlong */
    if (c == 0xED && s[1] > 0x9F)
      return 0; /* surrogate */
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!continues(s[1]) || !continues(s[2]) || !continues(s[3]))
      return 0;
    if (c == 0xF0 && s[1] < 0x90)
      return 0; /* overlong */
    if (c == 0xF4 && s[1] > 0x8F)
      return 0; /* above U+10FFFF */
    return 4;
  }
  return 0;
}

size_t durable__utf8_cut(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  size_t k = 0; /* continuation bytes just before n */
  while (k < n && k < 3 && continues(s[n - 1 - k]))
    k++;
  if (k == n)
    return n; /* no lead byte before them: not UTF-8, nothing to keep whole */
  unsigned char lead = s[n - 1 - k];
  size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return k + 1 < want ? n - 1 - k : n;
}
