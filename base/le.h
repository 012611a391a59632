// le.h — little-endian integers in byte arrays, whatever the host's order: the zip reader,
// token shards and training checkpoints read and write their headers with these.
#ifndef LE_H
#define LE_H

#include <stdint.h>

static inline uint16_t kg_get_le16(const void *p) {
    const uint8_t *b = p;
    return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t kg_get_le32(const void *p) {
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t kg_get_le64(const void *p) {
    return kg_get_le32(p) | (uint64_t)kg_get_le32((const uint8_t *)p + 4) << 32;
}

static inline void kg_put_le32(void *p, uint32_t v) {
    uint8_t *b = p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void kg_put_le64(void *p, uint64_t v) {
    kg_put_le32(p, (uint32_t)v);
    kg_put_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

#endif
