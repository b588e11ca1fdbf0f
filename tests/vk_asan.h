/* vk_asan.h — for the Vulkan tests under AddressSanitizer (`make asan`): the Vulkan loader unloads the
 * driver at vkDestroyInstance, and what the driver's globals still held then reads as a leak at exit
 * (lavapipe: 128 bytes from its start-up, with vk_rt_open + vk_rt_close alone). Keeping the driver
 * mapped (RTLD_NODELETE) leaves those blocks reachable, so the leak check sees only ours. A no-op in
 * other builds. */
#ifndef LLM170_TESTS_VK_ASAN_H
#define LLM170_TESTS_VK_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
static inline void vk_asan_pin_driver(void)
{
    static const char *const drivers[] = { "libvulkan_lvp.so", "libvulkan_radeon.so", "libvulkan_intel.so",
                                           "libGLX_nvidia.so.0" };
    for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++)
        (void)dlopen(drivers[i], RTLD_NOW | RTLD_NODELETE);
}
#else
static inline void vk_asan_pin_driver(void) {}
#endif

#endif
