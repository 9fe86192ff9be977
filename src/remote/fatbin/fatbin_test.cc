#include "remote/fatbin/fatbin.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/file.h"

namespace gpool::remote::fatbin {
namespace {

std::vector<std::byte> Fixture(const std::string& name) {
  auto text = ReadFile("testdata/remote/" + name);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return {};
  const auto* p = reinterpret_cast<const std::byte*>(text->data());
  return std::vector<std::byte>(p, p + text->size());
}

// Expected layouts come from the C++ declarations in testdata/remote/kernel.cu:
// (float*, const float*, int, Params{double; float[3]; int} /* 24 bytes, align 8 */).
const std::vector<KernelParam> kFourParams = {{0, 8}, {8, 8}, {16, 4}, {24, 24}};
// fill<double>(double*, double, char)
const std::vector<KernelParam> kFillParams = {{0, 8}, {8, 8}, {16, 1}};
constexpr const char* kScale = "_Z5scalePfPKfi6Params";
constexpr const char* kFill = "_Z4fillIdEvPT_S0_c";

void ExpectFixtureKernels(const std::map<std::string, KernelInfo, std::less<>>& kernels) {
  ASSERT_EQ(kernels.size(), 3u);
  for (const char* name : {"plain", kScale}) {
    auto it = kernels.find(name);
    ASSERT_NE(it, kernels.end()) << name;
    EXPECT_EQ(it->second.params, kFourParams) << name;
    EXPECT_EQ(it->second.param_bytes, 48u) << name;
  }
  auto fill = kernels.find(kFill);
  ASSERT_NE(fill, kernels.end());
  EXPECT_EQ(fill->second.params, kFillParams);
  EXPECT_EQ(fill->second.param_bytes, 17u);
}

std::map<std::string, KernelInfo, std::less<>> ByName(std::vector<KernelInfo> v) {
  std::map<std::string, KernelInfo, std::less<>> m;
  for (auto& k : v) m.emplace(k.name, std::move(k));
  return m;
}

TEST(CubinTest, BareCubinGivesEveryKernelsLayout) {
  auto kernels = ParseCubin(Fixture("kernel_sm90.cubin"));
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  ExpectFixtureKernels(ByName(std::move(*kernels)));
}

struct FormCase {
  const char* file;
  EntryKind source;
  std::vector<Compression> compressions;  // per entry, in order
};

class FatbinFormTest : public testing::TestWithParam<FormCase> {};

TEST_P(FatbinFormTest, ReportsLayoutsFromTheBestEntry) {
  const FormCase& c = GetParam();
  auto data = Fixture(c.file);
  auto entries = ListEntries(data);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), c.compressions.size());
  for (size_t i = 0; i < entries->size(); ++i) {
    EXPECT_EQ((*entries)[i].compression, c.compressions[i]) << "entry " << i;
    EXPECT_EQ((*entries)[i].arch % 10, 0u);
  }
  auto module = ParseFatbin(data);
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  EXPECT_EQ(module->source, c.source);
  EXPECT_EQ(module->arch, 90u);
  ExpectFixtureKernels(module->kernels);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, FatbinFormTest,
    testing::Values(
        FormCase{"kernel_sm90.fatbin", EntryKind::kCubin, {Compression::kNone, Compression::kZstd}},
        FormCase{"kernel_sm90_zstd.fatbin", EntryKind::kCubin,
                 {Compression::kZstd, Compression::kZstd}},
        FormCase{"kernel_sm90_lz4.fatbin", EntryKind::kCubin,
                 {Compression::kNone, Compression::kLz4}},
        FormCase{"kernel_ptx.fatbin", EntryKind::kPtx, {Compression::kZstd}},
        FormCase{"kernel_ptx_plain.fatbin", EntryKind::kPtx, {Compression::kNone}},
        FormCase{"kernel_ptx_lz4.fatbin", EntryKind::kPtx, {Compression::kLz4}}));

// The variables of globals.cu (__device__ int, __constant__ float[4], __device__ double[3][5])
// with their sizes, from the cubin's symbol table: what the emulated CUDA driver's
// cuModuleGetGlobal answers. The kernel (a function symbol) is not among them.
TEST(FatbinTest, CubinSymbolTableGivesTheVariablesAndTheirSizes) {
  auto module = ParseFatbin(Fixture("globals_sm90.fatbin"), {.target_arch = 90});
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  ASSERT_EQ(module->source, EntryKind::kCubin);
  const std::map<std::string, uint64_t, std::less<>> want = {
      {"gCounter", 4}, {"kCoeffs", 16}, {"gTable", 120}};
  EXPECT_EQ(module->globals, want);
  EXPECT_EQ(module->kernels.count("_Z10useGlobalsPi"), 1u);
  // The fixture kernels have no variables; PTX layouts carry none.
  auto plain = ParseFatbin(Fixture("kernel_ptx.fatbin"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->globals.empty());
}

TEST(FatbinTest, PtxEntriesAgreeWithTheCubin) {
  // The same kernels read from the PTX entry (zstd and LZ4) give the cubin's answer.
  for (const char* file : {"kernel_sm90.fatbin", "kernel_sm90_lz4.fatbin"}) {
    auto data = Fixture(file);
    auto entries = ListEntries(data);
    ASSERT_TRUE(entries.ok());
    ASSERT_EQ((*entries)[1].kind, EntryKind::kPtx);
    auto payload = EntryPayload((*entries)[1]);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    auto kernels = ParsePtx(std::string_view(reinterpret_cast<const char*>(payload->data()),
                                             payload->size()));
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    ExpectFixtureKernels(ByName(std::move(*kernels)));
  }
}

TEST(FatbinTest, TargetArchPicksTheMatchingCubin) {
  auto data = Fixture("kernel_sm80_sm90.fatbin");
  auto best = ParseFatbin(data);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->arch, 90u);
  auto on_a100 = ParseFatbin(data, {.target_arch = 86});
  ASSERT_TRUE(on_a100.ok());
  EXPECT_EQ(on_a100->arch, 80u);
  ExpectFixtureKernels(on_a100->kernels);
  // No cubin runs on sm_70 and there is no PTX to fall back on.
  auto on_v100 = ParseFatbin(data, {.target_arch = 70});
  EXPECT_EQ(on_v100.status().code(), StatusCode::kNotFound);
  // With PTX present, an unusable cubin falls back to it.
  auto ptx = ParseFatbin(Fixture("kernel_sm90.fatbin"), {.target_arch = 100});
  ASSERT_TRUE(ptx.ok());
  EXPECT_EQ(ptx->source, EntryKind::kPtx);
}

TEST(FatbinTest, WrapperLeadsToTheFatbin) {
  auto data = Fixture("kernel_sm90_zstd.fatbin");
  data.resize(data.size() + 64);  // trailing bytes of the host section are not part of it
  struct {
    uint32_t magic;
    uint32_t version;
    const void* fatbin;
    const void* unused;
  } wrapper = {kWrapperMagic, 1, data.data(), nullptr};
  auto span = FatbinFromWrapper(&wrapper);
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  EXPECT_EQ(span->data(), data.data());
  EXPECT_EQ(span->size(), data.size() - 64);
  auto module = ParseFatbin(*span);
  ASSERT_TRUE(module.ok());
  ExpectFixtureKernels(module->kernels);

  wrapper.magic = 0x12345678;
  EXPECT_EQ(FatbinFromWrapper(&wrapper).status().code(), StatusCode::kInvalidArgument);
  wrapper.magic = kWrapperMagic;
  // Version 2 (relocatable device code): the linked fatbin in `data`, the prelinked list ignored.
  wrapper.version = 2;
  auto linked = FatbinFromWrapper(&wrapper);
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->data(), data.data());
  EXPECT_EQ(linked->size(), data.size() - 64);
  wrapper.version = 3;
  EXPECT_EQ(FatbinFromWrapper(&wrapper).status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(FatbinFromWrapper(nullptr).ok());
}

TEST(PtxTest, LayoutRulesForAlignmentArraysAndComments) {
  auto k = ParsePtx(R"(
    // .entry commented_out(.param .u64 x)
    .visible .entry k1(
      .param .u8 a, /* c */ .param .u64 .ptr .global .align 1 p,
      .param .align 16 .b8 s[20], .param .f16 h, .param .b32 arr[3]
    ) { ret; }
    .entry noparams { ret; }
    .entry empty() { ret; }
  )");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  ASSERT_EQ(k->size(), 3u);
  EXPECT_EQ((*k)[0].name, "k1");
  // u8 @0; u64 with .align 1 @1; 20 bytes aligned 16 @16; f16 @36; 3 x b32 @40; end 52.
  std::vector<KernelParam> want = {{0, 1}, {1, 8}, {16, 20}, {36, 2}, {40, 12}};
  EXPECT_EQ((*k)[0].params, want);
  EXPECT_EQ((*k)[0].param_bytes, 52u);
  EXPECT_EQ((*k)[1].name, "noparams");
  EXPECT_TRUE((*k)[1].params.empty());
  EXPECT_EQ((*k)[2].name, "empty");
  EXPECT_EQ((*k)[2].param_bytes, 0u);
}

TEST(PtxTest, MalformedDeclarationsNameTheLine) {
  struct Bad {
    const char* text;
    const char* needle;
  } cases[] = {
      {"\n.entry k(.param .u64 a", "ptx:2"},
      {".entry k(.param .q64 a)", ".q64"},
      {".entry k(.param .u64)", "lacks"},
      {".entry k(.param .align 3 .b8 s[4])", "power of two"},
      {".entry k(.param .b8 s[x])", "array size"},
      {".entry k(.param .b8 s[4)", "array"},
      {".entry (", "without a name"},
      {".entry k(.u64 a)", ".param"},
  };
  for (const Bad& b : cases) {
    auto r = ParsePtx(b.text);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(r.status().message().find(b.needle), std::string::npos) << r.status().message();
  }
}

TEST(FatbinTest, HeaderErrorsSayWhatAndWhere) {
  auto data = Fixture("kernel_sm90.fatbin");
  auto bad = data;
  bad[0] = std::byte{0};
  EXPECT_NE(ParseFatbin(bad).status().message().find("bad magic"), std::string::npos);
  bad = data;
  bad[8] = std::byte{0xff};  // size claims more than given
  EXPECT_NE(ParseFatbin(bad).status().message().find("only"), std::string::npos);
  bad = data;
  bad[0x14] = std::byte{0x08};  // entry header size 8
  EXPECT_NE(ParseFatbin(bad).status().message().find("header size 8"), std::string::npos);
  bad = data;
  bad[0x1dd0 + 0x3c] = std::byte{0xff};  // PTX uncompressed size (u64 at +0x38) beyond the cap
  auto entries = ListEntries(bad);
  ASSERT_TRUE(entries.ok());
  EXPECT_NE(EntryPayload((*entries)[1]).status().message().find("uncompressed size"),
            std::string::npos);
  bad = data;
  bad[0x1dd0 + 0x50 + 8] ^= std::byte{0xff};  // corrupt the zstd stream
  entries = ListEntries(bad);
  ASSERT_TRUE(entries.ok());
  EXPECT_FALSE(EntryPayload((*entries)[1]).ok());
}

TEST(FatbinTest, TruncatedAndCorruptedInputNeverCrashes) {
  // Every prefix, then seeded random byte flips: errors are fine, crashes and
  // sanitizer reports are not.
  for (const char* file : {"kernel_sm90_zstd.fatbin", "kernel_ptx_lz4.fatbin"}) {
    auto data = Fixture(file);
    for (size_t n = 0; n < data.size(); ++n) {
      auto r = ParseFatbin(std::span(data).first(n));
      EXPECT_FALSE(r.ok()) << file << " prefix " << n;
    }
    std::mt19937 rng(42);
    for (int i = 0; i < 1500; ++i) {
      auto copy = data;
      for (int f = 0; f < 3; ++f) copy[rng() % copy.size()] ^= std::byte(1 + rng() % 255);
      (void)ParseFatbin(copy);
    }
  }
  auto cubin = Fixture("kernel_sm90.cubin");
  std::mt19937 rng(7);
  for (int i = 0; i < 1500; ++i) {
    auto copy = cubin;
    for (int f = 0; f < 4; ++f) copy[rng() % copy.size()] ^= std::byte(1 + rng() % 255);
    (void)ParseCubin(copy);
  }
  for (size_t n = 0; n < cubin.size(); n += 7) (void)ParseCubin(std::span(cubin).first(n));
}

// cuModuleLoadData's images: each form's extent is found from its own headers (the program's
// pointer carries no length), and each parses to the fixture's kernels.
TEST(ImageTest, EveryFormFindsItsLengthAndParses) {
  for (const char* file : {"kernel_sm90.cubin", "kernel_sm90.fatbin", "kernel_ptx_plain.fatbin"}) {
    SCOPED_TRACE(file);
    std::vector<std::byte> bytes = Fixture(file);
    // Trailing bytes that are not the image's (a program's buffer may be longer).
    std::vector<std::byte> padded = bytes;
    padded.resize(bytes.size() + 4096, std::byte{0x5a});
    auto image = ImageFromPointer(padded.data());
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    EXPECT_EQ(image->size(), bytes.size());
    auto module = ParseImage(*image, {.target_arch = 90});
    ASSERT_TRUE(module.ok()) << module.status().ToString();
    ExpectFixtureKernels(module->kernels);
  }
  // PTX text: the entry of the plain PTX fatbin, as a C string.
  const std::vector<std::byte> ptx_fatbin = Fixture("kernel_ptx_plain.fatbin");  // entries point in
  auto entries = ListEntries(ptx_fatbin);
  ASSERT_TRUE(entries.ok());
  auto payload = EntryPayload(entries->front());
  ASSERT_TRUE(payload.ok());
  std::string ptx(reinterpret_cast<const char*>(payload->data()), payload->size());
  ptx = ptx.c_str();  // up to its first NUL, as a program holds it
  auto image = ImageFromPointer(ptx.c_str());
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->size(), ptx.size() + 1);  // with its NUL
  auto module = ParseImage(*image);
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  EXPECT_EQ(module->source, EntryKind::kPtx);
  ExpectFixtureKernels(module->kernels);
  // A cubin's variables come from its symbol table, as from a fatbin's cubin.
  const std::vector<std::byte> globals_fatbin = Fixture("globals_sm90.fatbin");
  auto globals = ListEntries(globals_fatbin);
  ASSERT_TRUE(globals.ok());
  for (const Entry& e : *globals) {
    if (e.kind != EntryKind::kCubin) continue;
    auto elf = EntryPayload(e);
    ASSERT_TRUE(elf.ok());
    auto m = ParseImage(*elf);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->globals.at("gTable"), 120u);
  }
}

TEST(ImageTest, NeitherFormIsRefusedSayingWhat) {
  std::string junk(64, 'x');
  auto image = ImageFromPointer(junk.data(), 32);
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("no NUL found"), std::string::npos) << image.status().ToString();
  auto m = ParseImage(Bytes(reinterpret_cast<const std::byte*>(junk.data()), junk.size()));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("neither a fatbin"), std::string::npos);
}

}  // namespace
}  // namespace gpool::remote::fatbin
