/* Strict UTF-8 validation and GPT-2's byte-to-unicode alphabet. */
#include "data/utf8.h"

#include <string.h>

int utf8_seq_len(const uint8_t *p, size_t n) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3) return 0;
        uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c < 0xF5) {
        if (n < 4) return 0;
        uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

size_t utf8_valid_prefix(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        int k = utf8_seq_len(p + i, n - i);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

int utf8_incomplete_tail(const uint8_t *p, size_t n) {
    /* Look for a lead byte among the last 3 bytes whose sequence runs past the end. */
    for (int back = 1; back <= 3 && (size_t)back <= n; back++) {
        uint8_t c = p[n - back];
        if ((c & 0xC0) == 0x80) continue;
        int need = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        if (need <= back) return 0;
        /* Held back only if the bytes so far can still become a valid sequence. */
        uint8_t probe[4] = {c, 0x80, 0x80, 0x80};
        for (int k = 1; k < back; k++) probe[k] = p[n - back + k];
        if (c == 0xE0 && back < 2) probe[1] = 0xA0;
        if (c == 0xF0 && back < 2) probe[1] = 0x90;
        return utf8_seq_len(probe, 4) == need ? back : 0;
    }
    return 0;
}

/* bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100 + k in byte order. */
static int byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 non-printable bytes are 0..32, 127..160 and 173; k counts them in order. */
static int nonprintable_byte(uint32_t k) {
    return k < 33 ? (int)k : k < 67 ? (int)(127 + k - 33) : k == 67 ? 173 : -1;
}

uint32_t byteunicode_codepoint(uint8_t b) {
    if (byte_is_printable(b)) return b;
    return 0x100 + (b <= 32 ? b : b <= 160 ? 33u + (b - 127u) : 67u);
}

int byteunicode_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    return nonprintable_byte(cp - 0x100);
}

uint8_t byteunicode_order(int i) {
    if (i < 94) return (uint8_t)('!' + i);
    if (i < 106) return (uint8_t)(0xA1 + i - 94);
    if (i < 188) return (uint8_t)(0xAE + i - 106);
    return (uint8_t)nonprintable_byte((uint32_t)(i - 188));
}

size_t byteunicode_encode(const uint8_t *bytes, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = byteunicode_codepoint(bytes[i]);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

long byteunicode_decode(const char *s, size_t n, uint8_t *out, size_t *bad_at) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        if (p[i] < 0x80) {
            cp = p[i];
            i += 1;
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else {
            *bad_at = i;
            return -1;
        }
        int b = byteunicode_byte(cp);
        if (b < 0) {
            *bad_at = i - (cp < 0x80 ? 1 : 2);
            return -1;
        }
        out[o++] = (uint8_t)b;
    }
    return (long)o;
}
