// Images as cuModuleLoadData takes them: fatbin, wrapper, cubin or PTX (see fatbin.h).
#include <cstring>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"
#include "remote/fatbin/reader.h"

namespace gpool::remote::fatbin {
namespace {

constexpr unsigned char kImageElfMagic[4] = {0x7f, 'E', 'L', 'F'};
constexpr size_t kImageElfHeaderSize = 64;
constexpr size_t kImageSectionHeaderSize = 64;
constexpr uint32_t kImageShtNobits = 8;  // occupies no file space (.bss)

bool IsElfImage(const void* p) { return std::memcmp(p, kImageElfMagic, 4) == 0; }

// The file extent of an ELF64 image: the end of its header tables and of every section with
// file contents. Reads the header, then the section header table, then nothing else.
StatusOr<size_t> ElfImageSize(const std::byte* data) {
  Reader h(Bytes(data, kImageElfHeaderSize), "cubin ELF header");
  uint8_t elf_class = 0;
  uint64_t phoff = 0, shoff = 0;
  uint16_t phentsize = 0, phnum = 0, shentsize = 0, shnum = 0;
  GPOOL_RETURN_IF_ERROR(h.U8(4, &elf_class));
  if (elf_class != 2) {
    return Status::InvalidArgument(fmt::format("cubin: ELF class {} (want 2, ELF64)", elf_class));
  }
  GPOOL_RETURN_IF_ERROR(h.U64(0x20, &phoff));
  GPOOL_RETURN_IF_ERROR(h.U64(0x28, &shoff));
  GPOOL_RETURN_IF_ERROR(h.U16(0x36, &phentsize));
  GPOOL_RETURN_IF_ERROR(h.U16(0x38, &phnum));
  GPOOL_RETURN_IF_ERROR(h.U16(0x3a, &shentsize));
  GPOOL_RETURN_IF_ERROR(h.U16(0x3c, &shnum));
  constexpr uint64_t kLimit = uint64_t{1} << 32;  // a cubin of 4 GiB is not plausible
  if (shoff > kLimit || phoff > kLimit) {
    return Status::InvalidArgument(fmt::format("cubin: implausible header table offsets {} / {}",
                                               shoff, phoff));
  }
  if (shnum != 0 && shentsize != kImageSectionHeaderSize) {
    return Status::InvalidArgument(fmt::format("cubin: section header size {} (want 64)", shentsize));
  }
  uint64_t end = std::max<uint64_t>(kImageElfHeaderSize, shoff + uint64_t{shnum} * shentsize);
  end = std::max<uint64_t>(end, phoff + uint64_t{phnum} * phentsize);
  Reader sh(Bytes(data + shoff, uint64_t{shnum} * shentsize), "cubin section headers");
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t type = 0;
    uint64_t offset = 0, size = 0;
    GPOOL_RETURN_IF_ERROR(sh.U32(i * kImageSectionHeaderSize + 4, &type));
    GPOOL_RETURN_IF_ERROR(sh.U64(i * kImageSectionHeaderSize + 0x18, &offset));
    GPOOL_RETURN_IF_ERROR(sh.U64(i * kImageSectionHeaderSize + 0x20, &size));
    if (type == kImageShtNobits) continue;
    if (offset > kLimit || size > kLimit) {
      return Status::InvalidArgument(fmt::format("cubin: section {} at {} of {} bytes is implausible",
                                                 i, offset, size));
    }
    end = std::max(end, offset + size);
  }
  return static_cast<size_t>(end);
}

}  // namespace

StatusOr<Bytes> ImageFromPointer(const void* data, size_t max_bytes) {
  if (data == nullptr) return Status::InvalidArgument("module image: null pointer");
  const auto* p = static_cast<const std::byte*>(data);
  uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic == kWrapperMagic) return FatbinFromWrapper(data);
  if (magic == kFatbinMagic) {
    GPOOL_ASSIGN_OR_RETURN(size_t size, FatbinSize(Bytes(p, 16)));
    return Bytes(p, size);
  }
  if (IsElfImage(data)) {
    GPOOL_ASSIGN_OR_RETURN(size_t size, ElfImageSize(p));
    return Bytes(p, size);
  }
  // PTX: text up to its NUL (kept: a driver reads PTX as a C string).
  size_t n = strnlen(static_cast<const char*>(data), max_bytes);
  if (n == max_bytes) {
    return Status::InvalidArgument(fmt::format(
        "module image: not a fatbin (magic 0x{:08x}), ELF cubin or PTX text of under {} bytes "
        "(no NUL found)", magic, max_bytes));
  }
  return Bytes(p, n + 1);
}

StatusOr<Module> ParseImage(Bytes image, const ParseOptions& options) {
  if (image.size() >= 4) {
    uint32_t magic = 0;
    std::memcpy(&magic, image.data(), 4);
    if (magic == kFatbinMagic) return ParseFatbin(image, options);
    if (IsElfImage(image.data())) {
      GPOOL_ASSIGN_OR_RETURN(std::vector<KernelInfo> kernels, ParseCubin(image));
      Module m;
      m.source = EntryKind::kCubin;
      for (KernelInfo& k : kernels) {
        std::string name = k.name;
        m.kernels.emplace(std::move(name), std::move(k));
      }
      GPOOL_ASSIGN_OR_RETURN(m.globals, ParseCubinGlobals(image));
      return m;
    }
  }
  std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  if (text.find(".entry") == std::string_view::npos && text.find(".version") == std::string_view::npos) {
    return Status::InvalidArgument(
        "module image: neither a fatbin, an ELF cubin nor PTX text (no .version or .entry)");
  }
  GPOOL_ASSIGN_OR_RETURN(std::vector<KernelInfo> kernels, ParsePtx(text));
  Module m;
  m.source = EntryKind::kPtx;
  for (KernelInfo& k : kernels) {
    std::string name = k.name;
    m.kernels.emplace(std::move(name), std::move(k));
  }
  return m;
}

}  // namespace gpool::remote::fatbin
