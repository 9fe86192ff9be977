// The fatbin container: wrapper, header, entries and their decompression.
#include "remote/fatbin/fatbin.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>

#include <fmt/format.h>

#include "remote/fatbin/reader.h"

namespace gpool::remote::fatbin {
namespace {

constexpr uint64_t kFlagZstd = 0x8000;
constexpr uint64_t kFlagLz4 = 0x2000;
constexpr size_t kFatbinHeaderSize = 16;
constexpr size_t kMinEntryHeaderSize = 0x40;  // every field we read lies below 0x40

int ArchRank(const Entry& e, uint32_t target) {
  // Higher is better. Only cubins are ranked: a cubin runs on its own major version only.
  if (target == 0) return static_cast<int>(e.arch);
  if (e.arch / 10 != target / 10 || e.arch > target) return -1;
  return static_cast<int>(e.arch);
}

}  // namespace

StatusOr<size_t> FatbinSize(Bytes data) {
  Reader r(data, "fatbin");
  uint32_t magic = 0;
  uint16_t version = 0, header_size = 0;
  uint64_t size = 0;
  GPOOL_RETURN_IF_ERROR(r.U32(0, &magic));
  if (magic != kFatbinMagic) {
    return Status::InvalidArgument(
        fmt::format("fatbin: bad magic 0x{:08x} at offset 0 (want 0x{:08x})", magic, kFatbinMagic));
  }
  GPOOL_RETURN_IF_ERROR(r.U16(4, &version));
  GPOOL_RETURN_IF_ERROR(r.U16(6, &header_size));
  GPOOL_RETURN_IF_ERROR(r.U64(8, &size));
  if (version != 1) return Status::InvalidArgument(fmt::format("fatbin: unknown version {}", version));
  if (header_size < kFatbinHeaderSize) {
    return Status::InvalidArgument(fmt::format("fatbin: header size {} < 16", header_size));
  }
  if (size > (uint64_t{1} << 40)) {
    return Status::InvalidArgument(fmt::format("fatbin: implausible size {}", size));
  }
  return static_cast<size_t>(header_size + size);
}

StatusOr<Bytes> FatbinFromWrapper(const void* wrapper) {
  if (wrapper == nullptr) return Status::InvalidArgument("fatbin wrapper: null pointer");
  uint32_t magic = 0, version = 0;
  const void* data = nullptr;
  std::memcpy(&magic, wrapper, 4);
  std::memcpy(&version, static_cast<const char*>(wrapper) + 4, 4);
  std::memcpy(&data, static_cast<const char*>(wrapper) + 8, sizeof(data));
  if (magic != kWrapperMagic) {
    return Status::InvalidArgument(
        fmt::format("fatbin wrapper: bad magic 0x{:08x} (want 0x{:08x})", magic, kWrapperMagic));
  }
  // Version 2 is what a program with relocatable device code (-rdc, NCCL) registers from nvcc's
  // link stub: `data` is the fatbin nvlink produced (linked cubins, and PTX), and the next field
  // lists the objects' prelinked fatbins, which a driver needs only to JIT-link for an
  // architecture the linked fatbin lacks. The linked fatbin is taken and the list ignored, so such
  // a program runs where the linked fatbin has code for the device.
  if (version != 1 && version != 2) {
    return Status::Unimplemented(fmt::format(
        "fatbin wrapper version {}: only versions 1 and 2 (relocatable device code, linked) are "
        "handled", version));
  }
  if (data == nullptr) return Status::InvalidArgument("fatbin wrapper: null data pointer");
  // The header is read first on its own: only it tells how far the fatbin extends.
  GPOOL_ASSIGN_OR_RETURN(size_t size,
                         FatbinSize(Bytes(static_cast<const std::byte*>(data), kFatbinHeaderSize)));
  return Bytes(static_cast<const std::byte*>(data), size);
}

StatusOr<std::vector<Entry>> ListEntries(Bytes fatbin) {
  GPOOL_ASSIGN_OR_RETURN(size_t total, FatbinSize(fatbin));
  if (total > fatbin.size()) {
    return Status::InvalidArgument(
        fmt::format("fatbin: header says {} bytes, only {} given", total, fatbin.size()));
  }
  Reader r(fatbin.first(total), "fatbin");
  uint16_t header_size = 0;
  GPOOL_RETURN_IF_ERROR(r.U16(6, &header_size));
  std::vector<Entry> entries;
  size_t off = header_size;
  while (off < total) {
    uint16_t kind = 0, eversion = 0;
    uint32_t ehs = 0, compressed = 0, arch = 0;
    uint64_t payload = 0, flags = 0, usize = 0;
    GPOOL_RETURN_IF_ERROR(r.U16(off, &kind));
    GPOOL_RETURN_IF_ERROR(r.U16(off + 2, &eversion));
    GPOOL_RETURN_IF_ERROR(r.U32(off + 4, &ehs));
    GPOOL_RETURN_IF_ERROR(r.U64(off + 8, &payload));
    GPOOL_RETURN_IF_ERROR(r.U32(off + 0x10, &compressed));
    GPOOL_RETURN_IF_ERROR(r.U32(off + 0x1c, &arch));
    GPOOL_RETURN_IF_ERROR(r.U64(off + 0x28, &flags));
    GPOOL_RETURN_IF_ERROR(r.U64(off + 0x38, &usize));
    if (ehs < kMinEntryHeaderSize || ehs > total - off) {
      return Status::InvalidArgument(
          fmt::format("fatbin entry at offset {}: header size {} out of range", off, ehs));
    }
    if (payload > total - off - ehs) {
      return Status::InvalidArgument(fmt::format(
          "fatbin entry at offset {}: payload of {} bytes runs past the end ({})", off, payload,
          total));
    }
    Entry e;
    e.offset = off;
    e.arch = arch;
    e.flags = flags;
    e.uncompressed_size = usize;
    if (kind != static_cast<uint16_t>(EntryKind::kPtx) &&
        kind != static_cast<uint16_t>(EntryKind::kCubin)) {
      // Unknown kinds (e.g. NVVM IR) are skipped, not errors: a newer toolkit may add some.
      off += ehs + payload;
      continue;
    }
    e.kind = static_cast<EntryKind>(kind);
    size_t stored = payload;
    if (flags & kFlagZstd) {
      e.compression = Compression::kZstd;
    } else if (flags & kFlagLz4) {
      e.compression = Compression::kLz4;
    }
    if (e.compression != Compression::kNone) {
      // The payload is padded; the compressed stream's own length sits in the header.
      if (compressed == 0 || compressed > payload) {
        return Status::InvalidArgument(fmt::format(
            "fatbin entry at offset {}: compressed size {} outside payload of {}", off, compressed,
            payload));
      }
      stored = compressed;
    }
    e.stored = fatbin.subspan(off + ehs, stored);
    entries.push_back(e);
    off += ehs + payload;
  }
  return entries;
}

StatusOr<std::vector<std::byte>> EntryPayload(const Entry& entry, const ParseOptions& options) {
  if (entry.compression == Compression::kNone) {
    return std::vector<std::byte>(entry.stored.begin(), entry.stored.end());
  }
  if (entry.uncompressed_size == 0 || entry.uncompressed_size > options.max_entry_bytes) {
    return Status::InvalidArgument(
        fmt::format("fatbin entry at offset {}: uncompressed size {} outside 1..{}", entry.offset,
                    entry.uncompressed_size, options.max_entry_bytes));
  }
  std::vector<std::byte> out(entry.uncompressed_size);
  if (entry.compression == Compression::kZstd) {
    size_t n = ZSTD_decompress(out.data(), out.size(), entry.stored.data(), entry.stored.size());
    if (ZSTD_isError(n)) {
      return Status::InvalidArgument(fmt::format("fatbin entry at offset {}: zstd: {}",
                                                 entry.offset, ZSTD_getErrorName(n)));
    }
    out.resize(n);
    return out;
  }
  if (entry.stored.size() > static_cast<size_t>(INT32_MAX) || out.size() > INT32_MAX) {
    return Status::InvalidArgument(fmt::format("fatbin entry at offset {}: lz4 block too large",
                                               entry.offset));
  }
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(entry.stored.data()),
                              reinterpret_cast<char*>(out.data()),
                              static_cast<int>(entry.stored.size()), static_cast<int>(out.size()));
  if (n < 0) {
    return Status::InvalidArgument(
        fmt::format("fatbin entry at offset {}: corrupt lz4 block", entry.offset));
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

StatusOr<Module> ParseFatbin(Bytes fatbin, const ParseOptions& options) {
  GPOOL_ASSIGN_OR_RETURN(std::vector<Entry> entries, ListEntries(fatbin));
  const Entry* best_cubin = nullptr;
  const Entry* best_ptx = nullptr;
  for (const Entry& e : entries) {
    if (e.kind == EntryKind::kCubin) {
      int rank = ArchRank(e, options.target_arch);
      if (rank >= 0 && (best_cubin == nullptr || rank > ArchRank(*best_cubin, options.target_arch)))
        best_cubin = &e;
    } else if (best_ptx == nullptr || e.arch > best_ptx->arch) {
      best_ptx = &e;
    }
  }
  // A cubin's .nv.info is exact; PTX needs our own layout rules. Fall back only when needed,
  // and also when the cubin can't be read (a newer ELF layout): the PTX may still be.
  Status cubin_error;
  for (const Entry* e : {best_cubin, best_ptx}) {
    if (e == nullptr) continue;
    GPOOL_ASSIGN_OR_RETURN(std::vector<std::byte> payload, EntryPayload(*e, options));
    StatusOr<std::vector<KernelInfo>> kernels =
        e->kind == EntryKind::kCubin
            ? ParseCubin(payload)
            : ParsePtx(std::string_view(reinterpret_cast<const char*>(payload.data()),
                                        payload.size()));
    if (!kernels.ok()) {
      if (e->kind == EntryKind::kCubin) {
        cubin_error = kernels.status();
        continue;
      }
      return kernels.status();
    }
    Module m;
    m.source = e->kind;
    m.arch = e->arch;
    for (KernelInfo& k : *kernels) {
      std::string name = k.name;
      m.kernels.emplace(std::move(name), std::move(k));
    }
    if (e->kind == EntryKind::kCubin) {
      GPOOL_ASSIGN_OR_RETURN(m.globals, ParseCubinGlobals(payload));
    }
    return m;
  }
  if (!cubin_error.ok()) return cubin_error;
  return Status::NotFound(fmt::format("fatbin: no cubin or PTX entry among {} entries{}",
                                      entries.size(),
                                      options.target_arch != 0
                                          ? fmt::format(" usable on sm_{}", options.target_arch)
                                          : ""));
}

}  // namespace gpool::remote::fatbin
