import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.js'],
    setupFiles: ['test/setup.js'],
    // Real servers (MiniDFSCluster, httpd) on a 2-core machine: one test file at a time.
    fileParallelism: false,
    testTimeout: 120000,
    hookTimeout: 300000,
    reporters: ['default']
  }
})
