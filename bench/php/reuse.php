<?php

declare(strict_types=1);

// Many small uploads to httpd: is a connection set up per file, or reused? Variants:
//   sidecar            every file handed to the daemon (acked, unix socket), then waited for;
//                      the daemon keeps its connections to httpd alive and runs `concurrency` at once.
//                      The clock stops when the daemon (which runs only these jobs) has none left
//                      unfinished; each job's own end is checked after that, and timed apart
//                      ("checkedSeconds": up to Client::wait() on every job in turn)
//   sidecar-batch      the same, all files handed over in one Client::handOffAll() call (their
//                      lines pipelined, 32 at a time), as curl_multi is php-curl's batch
//   php-new-handle     curl_init/curl_close per file: a new connection per file
//   php-reused-handle  one handle for all files: keep-alive, one at a time
//   php-multi          curl_multi with `parallel` transfers in flight, connections reused
//   sidecar-paced, php-new-handle-paced
//                      sidecar and php-new-handle with a pause of `pauseUs` after each file: what a
//                      small upload costs when uploads come one at a time, as from a web page's users
// Argument: {"variant", "files": [paths], "url" (httpd collection, ends in /), "remotePrefix",
//            "socket", "daemonPid", "sidecarTarget", "parallel", "pauseUs" (the -paced variants)}
// Prints {"seconds", "ok", "failed", "firstErrors", "cpuS", ...}; the benchmark checks the files on
// the server afterwards.

require __DIR__ . '/common.php';

use TransferSidecar\Client;
use TransferSidecar\Exception\SidecarException;

$a = benchArgs();
$files = $a['files'];
$url = static fn (int $i): string => sprintf('%s%s-%05d.bin', $a['url'], $a['remotePrefix'], $i);
$errors = [];
$paced = str_ends_with($a['variant'], '-paced');
$pauseUs = $paced ? (int) $a['pauseUs'] : 0;
$variant = $paced ? substr($a['variant'], 0, -strlen('-paced')) : $a['variant'];
if ($paced && ($pauseUs <= 0 || !in_array($variant, ['sidecar', 'php-new-handle'], true))) {
    fail('a -paced variant is sidecar-paced or php-new-handle-paced, with pauseUs > 0');
}

/** Sets up $ch to PUT $file; returns the open file, to be closed once the transfer is done. */
$prepare = static function (\CurlHandle $ch, string $file, string $target) {
    $in = fopen($file, 'rb');
    curl_setopt_array($ch, [
        CURLOPT_URL => $target,
        CURLOPT_UPLOAD => true,
        CURLOPT_INFILE => $in,
        CURLOPT_INFILESIZE => filesize($file),
        CURLOPT_RETURNTRANSFER => true,
    ]);
    return $in;
};
$checkStatus = static function (\CurlHandle $ch, int $i) use (&$errors): void {
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    if ($status !== 201 && $status !== 204) {
        $errors[] = sprintf('file %d: HTTP %d %s', $i, $status, curl_error($ch));
    }
};

$cpu0 = cpuSeconds();
$daemonCpu0 = isset($a['daemonPid']) ? processCpuSeconds($a['daemonPid']) : 0.0;
$done = null; // the sidecar's figures when its jobs were done (before they are checked)
$started = hrtime(true);
switch ($variant) {
    case 'sidecar':
    case 'sidecar-thread':
    case 'sidecar-batch':
        $client = new Client(['socket' => $a['socket'], 'protocol' => $a['protocol'], 'read_timeout' => 60.0]
            + ($a['variant'] === 'sidecar-thread' ? ['handoff_socket' => $a['handoffSocket']] : []));
        $ids = [];
        $remote = static fn (int $i): string => sprintf('/%s-%05d.bin', $a['remotePrefix'], $i);
        if ($a['variant'] === 'sidecar-batch') {
            $jobs = array_map(static fn (int $i, string $file): array => ['direction' => 'upload', 'target' => $a['sidecarTarget'], 'local' => $file, 'remote' => $remote($i), 'overwrite' => true], array_keys($files), $files);
            foreach ($client->handOffAll($jobs) as $i => $result) {
                if ($result instanceof SidecarException) {
                    $errors[] = sprintf('file %d: %s', $i, $result->getMessage());
                } else {
                    $ids[$i] = $result;
                }
            }
        } else {
            foreach ($files as $i => $file) {
                try {
                    $ids[$i] = $client->upload($a['sidecarTarget'], $file, $remote($i), ['overwrite' => true]);
                } catch (SidecarException $e) {
                    $errors[] = sprintf('file %d: %s', $i, $e->getMessage());
                }
                if ($pauseUs) {
                    usleep($pauseUs);
                }
            }
        }
        // Done: the last job waited for, then /healthz until nothing is left unfinished.
        if ($ids !== []) {
            do {
                $job = $client->wait(end($ids), 300);
            } while (!in_array($job['state'], FINAL_STATES, true));
            while (sidecarUnfinished($a['socket']) > 0) {
                usleep(1000);
            }
        }
        $done = ['seconds' => (hrtime(true) - $started) / 1e9, 'cpuS' => cpuSeconds() - $cpu0, 'daemonCpuS' => processCpuSeconds($a['daemonPid']) - $daemonCpu0];
        foreach ($ids as $i => $id) {
            do {
                $job = $client->wait($id, 300);
            } while (!in_array($job['state'], FINAL_STATES, true));
            if ($job['state'] !== 'succeeded') {
                $errors[] = sprintf('file %d: %s %s', $i, $job['state'], json_encode($job['error']));
            }
        }
        break;

    case 'php-new-handle':
        foreach ($files as $i => $file) {
            $ch = curl_init();
            $in = $prepare($ch, $file, $url($i));
            curl_exec($ch);
            $checkStatus($ch, $i);
            curl_close($ch);
            fclose($in);
            if ($pauseUs) {
                usleep($pauseUs);
            }
        }
        break;

    case 'php-reused-handle':
        $ch = curl_init();
        foreach ($files as $i => $file) {
            $in = $prepare($ch, $file, $url($i));
            curl_exec($ch);
            $checkStatus($ch, $i);
            fclose($in);
        }
        curl_close($ch);
        break;

    case 'php-multi':
        $multi = curl_multi_init();
        curl_multi_setopt($multi, CURLMOPT_MAX_HOST_CONNECTIONS, (int) $a['parallel']);
        $next = 0;
        $inFlight = []; // spl_object_id(handle) => [index, handle, file]
        $start = static function () use (&$next, &$inFlight, $files, $multi, $prepare, $url): void {
            $ch = curl_init();
            $inFlight[spl_object_id($ch)] = [$next, $ch, $prepare($ch, $files[$next], $url($next))];
            curl_multi_add_handle($multi, $ch);
            $next++;
        };
        while ($next < count($files) && count($inFlight) < (int) $a['parallel']) {
            $start();
        }
        while ($inFlight !== []) {
            curl_multi_exec($multi, $running);
            while (($done = curl_multi_info_read($multi)) !== false) {
                [$i, $ch, $in] = $inFlight[spl_object_id($done['handle'])];
                unset($inFlight[spl_object_id($ch)]);
                if ($done['result'] !== CURLE_OK) {
                    $errors[] = sprintf('file %d: %s', $i, curl_strerror($done['result']));
                } else {
                    $checkStatus($ch, $i);
                }
                curl_multi_remove_handle($multi, $ch);
                curl_close($ch);
                fclose($in);
                if ($next < count($files)) {
                    $start();
                }
            }
            if ($inFlight !== [] && curl_multi_select($multi, 1.0) === -1) {
                usleep(100);
            }
        }
        curl_multi_close($multi);
        break;

    default:
        fail('unknown variant ' . json_encode($a['variant']));
}
$seconds = (hrtime(true) - $started) / 1e9;
emit([
    'variant' => $a['variant'],
    'pauseUs' => $pauseUs,
    'seconds' => $done['seconds'] ?? $seconds,
    'checkedSeconds' => $seconds,
    'ok' => count($files) - count($errors),
    'failed' => count($errors),
    'firstErrors' => array_slice($errors, 0, 3),
    'cpuS' => $done['cpuS'] ?? cpuSeconds() - $cpu0,
    'daemonCpuS' => $done['daemonCpuS'] ?? null,
]);
