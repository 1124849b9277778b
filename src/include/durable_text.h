/*
 * durable_text.h: the text rules that libdurable and its front ends share.
 *
 * Every layer and both front ends (the command, the Lua binding) write
 * messages made of text they do not control: a handler's error, a stored
 * payload, a line of libpq or SQLite.  The rules for such text are written
 * once, in src/common, and declared here, the one internal header that the
 * layers and the front ends all see.  Not installed.
 *
 * One line: a log line, an error and each line of the command's output are
 * one line, so that a log can be grepped and an output read line by line.
 * The rule is that a line break ('\n', '\r') becomes a space.  It comes in
 * the three forms its callers need: in place, for a message the caller owns
 * (a log line, an error); while writing, for a stored value printed as it
 * is (a JSON text, where a line break can only be white space between
 * tokens, so a space means the same); and as a tidy copy, for another
 * library's message (libpq's span indented lines), whose every run of white
 * space becomes one space, none at either end.
 *
 * UTF-8: what is one character (the rule paths, names and JSON strings are
 * held to), and where a text may be cut.  A message is cut to fit its
 * buffer in several places (an error's 512 bytes, a quoted value shortened,
 * a log line), and a cut inside a character would hand a reader -- a Lua
 * string, a terminal, a JSON encoder -- text that is not UTF-8.
 */
#ifndef DURABLE_TEXT_H
#define DURABLE_TEXT_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

/* Each line break ('\n', '\r') of `s` replaced by a space, in place; tabs
 * and every other byte are kept.  Returns `s` (NULL stays NULL). */
char *durable__one_line(char *s);

/* fputs(s, out), each line break written as a space. */
void durable__one_line_fputs(const char *s, FILE *out);

/* `src` into `dst` (`size` > 0 bytes) as one tidy line: each run of white
 * space (' ', '\t', '\n', '\r') becomes one space, and there is none at
 * either end.  Cut to fit: the result is the longest such line that fits,
 * never ending in a space nor inside a UTF-8 character (durable__utf8_cut).
 * `dst` may be `src` (the text only shrinks).
 * Returns `dst`. */
char *durable__one_line_copy(char *dst, size_t size, const char *src);

/* The length in bytes (1 to 4) of the UTF-8 character at `s`, or 0 when the
 * bytes there are not one: a stray continuation byte, a sequence cut short,
 * an overlong form, a surrogate (U+D800..U+DFFF), anything above U+10FFFF.
 * An ASCII byte is 1, '\0' too: the caller stops at the end.  Reads no
 * further than the first byte that breaks the sequence, so never past the
 * terminating NUL. */
size_t durable__utf8_len(const char *s);

/* The length of the longest head of the first `n` bytes of `s` that does not
 * end inside a character: `n`, or less when the bytes before `n` are the
 * start of a character that goes on past it.  Reads only s[0..n), so `s`
 * may be a buffer being filled.  Cut there, a text that was UTF-8 still
 * is. */
size_t durable__utf8_cut(const char *s, size_t n);

/* A time as text: milliseconds since the epoch as ISO-8601 UTC with
 * milliseconds, "2025-01-31T12:34:56.789Z" -- how the mesh stores times
 * in node contents and how the command and the log show them.  0, or -1
 * with `out` empty for a year the C library cannot write (src/common/
 * clock.c). */
#define DURABLE_ISO_TIME_MAX 32
int durable__iso_time(int64_t ms, char out[DURABLE_ISO_TIME_MAX]);

#ifdef __cplusplus
}
#endif
#endif /* DURABLE_TEXT_H */
