// tok_spm.cc — the extern "C" shim over libsentencepiece (see tok_spm.h). Every entry point
// catches all exceptions: a C caller only ever sees KG_* codes and messages.
#include "tok_spm.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "base/kg.h"
}

struct TokSpm {
    sentencepiece::SentencePieceProcessor sp;
    size_t max_bytes; // tok_spm_max_bytes
};

// One protobuf field of a message (wire format): its number, wire type, and its varint value
// or its bytes. Returns the position after it, or 0 on malformed input.
static size_t spm_pb_field(const std::string &m, size_t i, int *field, int *type, uint64_t *v,
                           size_t *at, size_t *len) {
    auto varint = [&m](size_t &j, uint64_t &x) {
        x = 0;
        for (int shift = 0; j < m.size() && shift < 64; shift += 7) {
            uint8_t c = static_cast<uint8_t>(m[j++]);
            x |= static_cast<uint64_t>(c & 0x7f) << shift;
            if (c < 0x80) return true;
        }
        return false;
    };
    uint64_t key;
    if (!varint(i, key)) return 0;
    *field = static_cast<int>(key >> 3), *type = static_cast<int>(key & 7);
    *v = 0, *at = i, *len = 0;
    switch (*type) {
    case 0:
        return varint(i, *v) ? i : 0;
    case 1:
        *len = 8;
        break;
    case 2:
        if (!varint(i, *v) || *v > m.size() - i) return 0;
        *at = i, *len = static_cast<size_t>(*v);
        break;
    case 5:
        *len = 4;
        break;
    default:
        return 0;
    }
    return *len <= m.size() - *at ? *at + *len : 0;
}

// The bound of tok_max_bytes_per_token for a loaded model: the longest piece when text is never
// mapped nor dropped (an empty precompiled_charsmap, remove_extra_whitespaces off) and unknown
// characters fall back to bytes (byte_fallback); else 0. Fields of sentencepiece_model.proto:
// ModelProto.trainer_spec 2 (byte_fallback 35, default false), .normalizer_spec 3
// (precompiled_charsmap 2, remove_extra_whitespaces 4, default true).
static size_t spm_max_bytes(const sentencepiece::SentencePieceProcessor &sp) {
    std::string m = sp.serialized_model_proto();
    bool charsmap = false, remove_ws = true, byte_fallback = false;
    int field, type;
    uint64_t v;
    size_t at, len;
    for (size_t i = 0; i < m.size();) {
        if (!(i = spm_pb_field(m, i, &field, &type, &v, &at, &len))) return 0;
        if ((field != 2 && field != 3) || type != 2) continue;
        std::string sub = m.substr(at, len);
        for (size_t k = 0; k < sub.size();) {
            int f2, t2;
            uint64_t v2;
            size_t at2, len2;
            if (!(k = spm_pb_field(sub, k, &f2, &t2, &v2, &at2, &len2))) return 0;
            if (field == 2 && f2 == 35 && t2 == 0) byte_fallback = v2 != 0;
            if (field == 3 && f2 == 2 && t2 == 2) charsmap = len2 > 0;
            if (field == 3 && f2 == 4 && t2 == 0) remove_ws = v2 != 0;
        }
    }
    if (charsmap || remove_ws || !byte_fallback) return 0;
    size_t longest = 1;
    for (int id = 0; id < sp.GetPieceSize(); id++)
        longest = std::max(longest, sp.IdToPiece(id).size());
    return longest;
}

extern "C" int tok_spm_open(TokSpm **out, const char *path, char *err) {
    *out = nullptr;
    TokSpm *s = nullptr;
    try {
        s = new TokSpm;
        sentencepiece::util::Status st = s->sp.Load(path);
        if (!st.ok()) {
            int code = st.code() == sentencepiece::util::StatusCode::kNotFound ||
                               st.code() == sentencepiece::util::StatusCode::kPermissionDenied
                           ? KG_EIO
                           : KG_EFORMAT;
            kg_err(err, code, "%s: not a SentencePiece model (%s)", path, st.ToString().c_str());
            delete s;
            return code;
        }
        if (s->sp.GetPieceSize() <= 0) {
            delete s;
            return kg_err(err, KG_EFORMAT, "sentencepiece load %s: empty vocabulary", path);
        }
        s->max_bytes = spm_max_bytes(s->sp);
    } catch (const std::bad_alloc &) {
        delete s;
        return kg_err(err, KG_ENOMEM, "sentencepiece load %s: out of memory", path);
    } catch (const std::exception &e) {
        delete s;
        return kg_err(err, KG_EFORMAT, "sentencepiece load %s: %s", path, e.what());
    } catch (...) {
        delete s;
        return kg_err(err, KG_EINTERNAL, "sentencepiece load %s: unknown exception", path);
    }
    *out = s;
    return KG_OK;
}

extern "C" void tok_spm_free(TokSpm *s) { delete s; }

extern "C" int tok_spm_encode(const TokSpm *s, const char *text, size_t len, int **ids, size_t *n,
                              char *err) {
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int> v;
        sentencepiece::util::Status st = s->sp.Encode(absl::string_view(text, len), &v);
        if (!st.ok())
            return kg_err(err, KG_EINTERNAL, "sentencepiece encode: %s", st.ToString().c_str());
        if (v.empty()) return KG_OK;
        int *out = static_cast<int *>(malloc(v.size() * sizeof(int)));
        if (!out) return kg_err(err, KG_ENOMEM, "sentencepiece encode: out of memory");
        memcpy(out, v.data(), v.size() * sizeof(int));
        *ids = out;
        *n = v.size();
    } catch (const std::bad_alloc &) {
        return kg_err(err, KG_ENOMEM, "sentencepiece encode: out of memory");
    } catch (const std::exception &e) {
        return kg_err(err, KG_EINTERNAL, "sentencepiece encode: %s", e.what());
    } catch (...) {
        return kg_err(err, KG_EINTERNAL, "sentencepiece encode: unknown exception");
    }
    return KG_OK;
}

extern "C" int tok_spm_decode(const TokSpm *s, const int *ids, size_t n, char **text, size_t *len,
                              char *err) {
    *text = nullptr;
    *len = 0;
    try {
        std::vector<int> v(ids, ids + n);
        std::string out;
        sentencepiece::util::Status st = s->sp.Decode(v, &out);
        if (!st.ok())
            return kg_err(err, KG_EINTERNAL, "sentencepiece decode: %s", st.ToString().c_str());
        char *t = static_cast<char *>(malloc(out.size() + 1));
        if (!t) return kg_err(err, KG_ENOMEM, "sentencepiece decode: out of memory");
        memcpy(t, out.data(), out.size());
        t[out.size()] = '\0';
        *text = t;
        *len = out.size();
    } catch (const std::bad_alloc &) {
        return kg_err(err, KG_ENOMEM, "sentencepiece decode: out of memory");
    } catch (const std::exception &e) {
        return kg_err(err, KG_EINTERNAL, "sentencepiece decode: %s", e.what());
    } catch (...) {
        return kg_err(err, KG_EINTERNAL, "sentencepiece decode: unknown exception");
    }
    return KG_OK;
}

extern "C" size_t tok_spm_size(const TokSpm *s) {
    return static_cast<size_t>(s->sp.GetPieceSize());
}

extern "C" size_t tok_spm_max_bytes(const TokSpm *s) { return s->max_bytes; }

extern "C" const char *tok_spm_piece(const TokSpm *s, int id) {
    if (id < 0 || id >= s->sp.GetPieceSize()) return nullptr;
    try {
        return s->sp.IdToPiece(id).c_str(); // a reference into the loaded model: lives with s
    } catch (...) {
        return nullptr;
    }
}

extern "C" int tok_spm_piece_id(const TokSpm *s, const char *piece) {
    try {
        int id = s->sp.PieceToId(piece);
        if (id < 0 || id >= s->sp.GetPieceSize() || s->sp.IdToPiece(id) != piece) return -1;
        return id;
    } catch (...) {
        return -1;
    }
}

extern "C" TokSpmType tok_spm_type(const TokSpm *s, int id) {
    try {
        if (s->sp.IsControl(id)) return TOK_SPM_CONTROL;
        if (s->sp.IsUnknown(id)) return TOK_SPM_UNKNOWN;
        if (s->sp.IsUnused(id)) return TOK_SPM_UNUSED;
        if (s->sp.IsByte(id)) return TOK_SPM_BYTE;
    } catch (...) {
    }
    return TOK_SPM_NORMAL;
}

extern "C" void tok_spm_special(const TokSpm *s, int *bos, int *eos, int *unk, int *pad) {
    int n = s->sp.GetPieceSize();
    auto valid = [n](int id) { return id >= 0 && id < n ? id : -1; };
    *bos = valid(s->sp.bos_id());
    *eos = valid(s->sp.eos_id());
    *unk = valid(s->sp.unk_id());
    *pad = valid(s->sp.pad_id());
}
