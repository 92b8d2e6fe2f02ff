/* Strict UTF-8 validation and GPT-2's byte-to-unicode alphabet.
 *
 * Valid UTF-8 is the Unicode definition: no overlong forms, no surrogates
 * (U+D800..DFFF), nothing above U+10FFFF. A byte that does not begin a valid
 * sequence is "invalid" on its own and scanning resumes at the next byte; this is
 * the same set of bytes that Python's decoder escapes with errors="surrogateescape". */
#ifndef HG_DATA_UTF8_H
#define HG_DATA_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid sequence starting at p, or 0 if p[0] begins none. */
int utf8_seq_len(const uint8_t *p, size_t n);
/* Length of the longest valid prefix of p[0..n). */
size_t utf8_valid_prefix(const uint8_t *p, size_t n);
/* Number of bytes at the end of p[0..n) that form an incomplete but so far valid
 * sequence (0..3): the bytes a streaming decoder must hold back. */
int utf8_incomplete_tail(const uint8_t *p, size_t n);

/* GPT-2's bytes_to_unicode(): every byte maps to one printable code point.
 * Bytes are also ranked in GPT-2's order (printable ASCII '!'..'~' first), which is
 * the order of ids 0..255 in GPT-2's vocabulary and in vocabularies handgrad trains. */
uint32_t byteunicode_codepoint(uint8_t b);
/* The byte whose code point is cp, or -1 if cp is outside the alphabet. */
int byteunicode_byte(uint32_t cp);
/* GPT-2's byte order: byteunicode_order(i) is the byte with id i, i in [0, 256). */
uint8_t byteunicode_order(int i);
/* Appends the UTF-8 form of the mapped bytes to out (at most 2 bytes per input byte);
 * returns the number of bytes written. */
size_t byteunicode_encode(const uint8_t *bytes, size_t n, char *out);
/* Decodes a UTF-8 string in the byte alphabet back to bytes; out has room for n.
 * Returns the byte count, or -1 with *bad_at set to the offending offset. */
long byteunicode_decode(const char *s, size_t n, uint8_t *out, size_t *bad_at);

#endif
