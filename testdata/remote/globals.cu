// Fixture source for the cubin variable list (ParseCubinGlobals); see README.md.
__device__ int gCounter;
__constant__ float kCoeffs[4];
__device__ double gTable[3][5];
__global__ void useGlobals(int* out) { out[0] = gCounter + (int)kCoeffs[1] + (int)gTable[2][4]; }
