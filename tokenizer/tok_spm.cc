// tok_spm.cc — the extern "C" shim over libsentencepiece (see tok_spm.h). Every entry point
// catches all exceptions: a C caller only ever sees KG_* codes and messages.
#include "tok_spm.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "model/kg.h"
}

struct TokSpm {
    sentencepiece::SentencePieceProcessor sp;
};

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
