// Fatbin parsing: the client-side fallback that learns each kernel's parameter layout (offset and
// size of every argument) from the device code a program registers, so that a launch's `void**
// args` can be packed into one buffer without the CUDA driver.
//
// Layers, outermost first (all integers little-endian; layouts checked with xxd on CUDA 13.0
// output, see testdata/remote/README.md):
//   wrapper  __fatBinC_Wrapper_t {u32 magic 0x466243b1, u32 version, const void* data, ...}, the
//            argument of __cudaRegisterFatBinary; `data` points at a fatbin.
//   fatbin   {u32 magic 0xBA55ED50, u16 version 1, u16 header_size, u64 size of the entries}.
//   entry    {u16 kind (1 PTX, 2 ELF), u16 version, u32 header_size, u64 payload_size,
//            u32 compressed_size, u32 ?, u16 minor, u16 major, u32 sm_arch, u32 name_offset,
//            u32 name_size, u64 flags, u64 ?, u64 uncompressed_size, ...}; the payload follows
//            header_size bytes later (headers grow between releases: always skip by header_size).
//            flags & 0x8000: zstd frame; flags & 0x2000: raw LZ4 block.
//   cubin    ELF64; sections ".nv.info.<kernel>" hold EIATTR records, 4-byte aligned
//            [fmt u8][attr u8][u16 value or payload length]; fmt 4 (EIFMT_SVAL) carries a payload.
//            EIATTR_KPARAM_INFO (0x17): {u32 index, u16 ordinal, u16 offset, u32 bits with the
//            size in bits 18..31}; EIATTR_CBANK_PARAM_SIZE (0x19) the total.
//   PTX      ".entry name(.param .u64 a, .param .align 8 .b8 s[24], ...)".
// Limits: relocatable-device-code wrappers (version 2, linked at load time) are not handled;
// decompressed entries are capped by ParseOptions::max_entry_bytes. Malformed input of any kind
// gives InvalidArgument naming the layer and offset, never a crash (fuzzed: fuzz/fatbin_fuzz.cc).
// Thread safety: free functions over caller-owned bytes; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool::remote::fatbin {

using Bytes = std::span<const std::byte>;

inline constexpr uint32_t kWrapperMagic = 0x466243b1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

enum class EntryKind : uint16_t { kPtx = 1, kCubin = 2 };
enum class Compression { kNone, kZstd, kLz4 };

struct ParseOptions {
  // Largest decompressed entry accepted (a hostile header must not make us allocate gigabytes).
  size_t max_entry_bytes = size_t{256} << 20;
  // The device's SM version (90 for sm_90). 0: prefer the highest cubin arch found. Otherwise a
  // cubin of the same major version and arch <= this is preferred, then PTX.
  uint32_t target_arch = 0;
};

struct Entry {
  EntryKind kind = EntryKind::kPtx;
  uint32_t arch = 0;        // 90 for sm_90 / compute_90
  uint64_t flags = 0;
  Compression compression = Compression::kNone;
  size_t offset = 0;        // of the entry header within the fatbin
  Bytes stored;             // the payload as stored (maybe compressed); points into the input
  size_t uncompressed_size = 0;  // as the header claims; 0 when not compressed
};

struct KernelParam {
  uint32_t offset = 0;
  uint32_t size = 0;
  friend bool operator==(const KernelParam&, const KernelParam&) = default;
};

struct KernelInfo {
  std::string name;                 // mangled, as __cudaRegisterFunction's deviceName
  std::vector<KernelParam> params;  // by ordinal
  uint32_t param_bytes = 0;         // total size of the parameter buffer
};

struct Module {
  EntryKind source = EntryKind::kCubin;  // which entry the layouts came from
  uint32_t arch = 0;
  std::map<std::string, KernelInfo, std::less<>> kernels;
  // The module's variables (__device__, __constant__, __managed__): name -> size in bytes, from
  // the cubin's symbol table (defined STT_OBJECT symbols). Empty when the layouts came from PTX.
  std::map<std::string, uint64_t, std::less<>> globals;
};

// The fatbin a registration wrapper points at, with its length taken from the fatbin header.
// `wrapper` must be readable memory of at least 16 bytes (it is the program's own data).
StatusOr<Bytes> FatbinFromWrapper(const void* wrapper);
// Total length (header + entries) of the fatbin starting at `data`, from its header.
StatusOr<size_t> FatbinSize(Bytes data);

// Lists the entries of one fatbin.
StatusOr<std::vector<Entry>> ListEntries(Bytes fatbin);
// The payload of `entry`, decompressed if needed.
StatusOr<std::vector<std::byte>> EntryPayload(const Entry& entry, const ParseOptions& options = {});

// Parameter layouts of every kernel in a cubin (ELF) / PTX text.
StatusOr<std::vector<KernelInfo>> ParseCubin(Bytes elf);
// The defined variables of a cubin (see Module::globals).
StatusOr<std::map<std::string, uint64_t, std::less<>>> ParseCubinGlobals(Bytes elf);
StatusOr<std::vector<KernelInfo>> ParsePtx(std::string_view ptx);

// Picks the best entry (a cubin, else PTX) and returns its kernels' layouts.
StatusOr<Module> ParseFatbin(Bytes fatbin, const ParseOptions& options = {});

// What cuModuleLoadData accepts (image.cc): a fatbin, a registration wrapper of one, a cubin (ELF)
// or NUL-terminated PTX text. ImageFromPointer finds the image's extent from its own headers
// (a fatbin's size field; an ELF's section and program header tables and the sections they list;
// PTX up to its NUL, which is included, at most `max_bytes`), reading only that much of `data`, a
// program's pointer. InvalidArgument names what could not be read.
StatusOr<Bytes> ImageFromPointer(const void* data, size_t max_bytes = size_t{256} << 20);
// Layouts and variables of any image ImageFromPointer accepts (a wrapper excepted): a fatbin as
// ParseFatbin, a cubin as ParseCubin and ParseCubinGlobals, PTX as ParsePtx (no variables).
StatusOr<Module> ParseImage(Bytes image, const ParseOptions& options = {});

}  // namespace gpool::remote::fatbin
