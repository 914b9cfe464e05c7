<?php

declare(strict_types=1);

// One timed transfer from PHP, as bench/lib/throughput.js runs it in its own php process:
//   php-returntransfer  download with CURLOPT_RETURNTRANSFER, then file_put_contents (the study's way)
//   php-file            download with CURLOPT_FILE
//   php-infile          upload with CURLOPT_UPLOAD + CURLOPT_INFILE
//   sidecar             job handed to the daemon over its unix socket, timed until it has ended
// The php-curl modes go through TransferSidecar\DirectCurl (the library's own baseline).
// Argument: {"competitor", "direction", "local", "remote",
//            "target": {"type": "http", "url"} | {"type": "webhdfs", "namenode", "user", "base"},
//            "socket", "sidecarTarget", "digest"?}   (the last three for the sidecar only; "digest" is
//            the job's digest option, "none" for the bench's sidecar-none competitor)
// Prints {"seconds", "cpuS", "bytes", "job"?, "peakRssKiB", "memoryPeakBytes"}.

require __DIR__ . '/common.php';

use TransferSidecar\Client;
use TransferSidecar\DirectCurl;
use TransferSidecar\Exception\SidecarException;
use TransferSidecar\Exception\TransferException;

$a = benchArgs();
$direction = $a['direction'];
$local = $a['local'];
$remote = $a['remote'];

if ($a['competitor'] === 'sidecar') {
    $client = new Client(['socket' => $a['socket'], 'read_timeout' => 60.0]);
    $options = ['overwrite' => true] + (isset($a['digest']) ? ['digest' => $a['digest']] : []);
    $cpu0 = cpuSeconds();
    $started = hrtime(true);
    try {
        $id = $direction === 'upload'
            ? $client->upload($a['sidecarTarget'], $local, $remote, $options)
            : $client->download($a['sidecarTarget'], $local, $remote, $options);
        do {
            $job = $client->wait($id, 300);
        } while (!in_array($job['state'], FINAL_STATES, true));
    } catch (SidecarException $e) {
        fail('sidecar: ' . $e->getMessage());
    }
    $seconds = (hrtime(true) - $started) / 1e9;
    emit([
        'seconds' => $seconds,
        'cpuS' => cpuSeconds() - $cpu0,
        'bytes' => $job['bytes'],
        'job' => array_intersect_key($job, array_flip(['id', 'state', 'bytes', 'sha256', 'error', 'createdAt', 'startedAt', 'finishedAt'])),
    ]);
    exit(0);
}

$modes = ['php-returntransfer' => ['download', 'buffered'], 'php-file' => ['download', 'streamed'], 'php-infile' => ['upload', 'streamed']];
[$modeDirection, $mode] = $modes[$a['competitor']] ?? fail('unknown competitor ' . json_encode($a['competitor']));
if ($modeDirection !== $direction) {
    fail(sprintf('%s is a %s competitor, not %s', $a['competitor'], $modeDirection, $direction));
}

$t = $a['target'];
$curl = new DirectCurl();
$cpu0 = cpuSeconds();
$started = hrtime(true);
try {
    if ($t['type'] === 'http') {
        $url = $t['url'] . ltrim($remote, '/');
        $r = $direction === 'download' ? $curl->downloadHttp($url, $local, $mode) : $curl->uploadHttp($url, $local, $mode);
    } else {
        $hdfsPath = rtrim($t['base'], '/') . $remote;
        $r = $direction === 'download'
            ? $curl->downloadWebHdfs($t['namenode'], $t['user'], $hdfsPath, $local, $mode)
            : $curl->uploadWebHdfs($t['namenode'], $t['user'], $hdfsPath, $local, $mode);
    }
} catch (TransferException $e) {
    fail($a['competitor'] . ': ' . $e->getMessage());
}
$seconds = (hrtime(true) - $started) / 1e9;
emit(['seconds' => $seconds, 'cpuS' => cpuSeconds() - $cpu0, 'bytes' => $r['bytes']]);
