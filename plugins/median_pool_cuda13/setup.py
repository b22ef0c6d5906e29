"""The CUDA library of a GPU companion: nvcc builds libopm_median_pool_cuda13.so inside the
package (opmarket.sdk.library_setup with build_cuda_library: CUDA runtime linked shared, run
path into the nvidia-cuda-runtime wheel, SASS for sm_80 and sm_90, PTX for compute_75) and
records what it built in cuda_build.json. Without a CUDA 13 nvcc the build fails and says
so: there is no CPU-only build of a GPU companion (the base plugin is that).
"""

from setuptools import setup

from opmarket.sdk.build import library_setup

setup(
    **library_setup(
        "opmarket_median_pool_cuda13",
        "libopm_median_pool_cuda13.so",
        ["src/opmarket_median_pool_cuda13/median_pool.cu"],
        cuda_runtime=13,
    )
)
